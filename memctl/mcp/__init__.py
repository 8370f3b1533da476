"""memctl as a Model Context Protocol server: `tools` is the table of tools over
`memctl.Memory`, `server` serves it over stdio with the official `mcp` SDK.

Neither is imported by the plain command line: the SDK costs a second of start-up
(`memctl mcp` imports it inside the command).
"""
