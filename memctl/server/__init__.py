"""The resident memctl: one background process per store keeps the embedding model, the vectors
and the Tantivy reader open, and runs the command line's calls in it (README "The resident server").

client.py is what every `memctl` call runs first (standard library only, no click); serve.py
is the server, which runs the click command line for each call it is handed.
"""
