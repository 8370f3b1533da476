"""The built-in split where the user says the subject changes (issue 22): an acknowledgement followed
by a new subject opens a topic, an announced return goes back to the dormant topic it names, in
English and in Chinese. Through `memctl split` in process, with the fake embedder."""

from __future__ import annotations

import json

from test_topics import session_lines

LOGIN = ["The login page returns a 500 error after I submit the form.",
         "The 500 on login comes from the session middleware: the secret key is missing in production.",
         "Where do I set the session secret key for the login middleware?",
         "Set SESSION_SECRET in the production environment; the login middleware reads it at start.",
         "The login form works again with the session secret set.",
         "Good: the login session middleware now finds its secret key."]
BILLING = ["Let's switch to the billing service.",
           "Sure. What does the billing service do wrong with invoices?",
           "The billing service charges the invoice twice when the payment webhook retries.",
           "Make the billing webhook idempotent: store the payment id of each invoice charge.",
           "Should the billing service keep payment ids in the invoices table?",
           "Yes, a unique payment id column on the invoices table stops a second charge."]
CI = ["Ok, next thing: the CI pipeline is failing on the docker build step.",
      "The CI docker build fails because the pipeline cache key changed with the new runner image.",
      "How do I reset the docker layer cache in the CI pipeline?",
      "Bump the cache key in the pipeline yaml; the runner then rebuilds every docker layer.",
      "The CI pipeline is green again after the docker cache reset.",
      "Good, the runner image and the pipeline cache key agree now."]
RELEASE = ["Thanks! Now can you help me write the release notes?",
           "Happy to write the release notes: which changes go into this release?",
           "The release notes should list the new export button, dark mode and faster search.",
           "Release notes draft: this release brings an export button, dark mode and a faster search.",
           "Add a line to the release notes thanking contributors to this release.",
           "Done: the release notes now end by thanking every contributor to the release."]
BILLING_AGAIN = ["Going back to the billing issue: the invoice total is wrong when a payment is refunded.",
                 "A refunded payment must lower the invoice total: the billing service skips refunds.",
                 "Can the billing service recompute the invoice after each refund payment?",
                 "Yes, recompute the invoice total in the billing refund handler."]


def topics_of(run, texts: list[str]) -> list[str]:
    run("ingest", "-", input=session_lines(texts))
    rows = {r["message_id"]: r["topic_id"] for r in map(json.loads, run(
        "split", "--session", "s1", "--force", "--keep-recent", "0", "--json").stdout.splitlines())}
    return [rows[f"m{n}"] for n in range(len(texts))]


def test_announced_switches_open_topics_and_an_announced_return_goes_back(run, store_dir):
    # The coding-assistant chat of issue 22: every switch begins as a reply ("Let's", "Ok", "Thanks"),
    # which never opened a topic, and the return opened a new one.
    subjects = [LOGIN, BILLING, CI, RELEASE, BILLING_AGAIN]
    topics = topics_of(run, [text for subject in subjects for text in subject])
    per_subject, start = [], 0
    for subject in subjects:
        per_subject.append(topics[start:start + len(subject)])
        start += len(subject)
    assert [len(set(found)) for found in per_subject] == [1, 1, 1, 1, 1], per_subject
    login, billing, ci, release, billing_again = (found[0] for found in per_subject)
    assert len({login, billing, ci, release}) == 4
    assert billing_again == billing


def test_a_return_with_no_phrase_of_its_own_goes_back_to_the_likeliest_dormant_topic(run, store_dir):
    texts = LOGIN[:4] + BILLING[:4] + ["Back to what we were doing before: does the fix need a restart?",
                                       "Yes, restart the app after setting the secret."]
    topics = topics_of(run, texts)
    assert topics[8] == topics[9] == topics[0] != topics[4]


def test_an_acknowledgement_alone_stays_with_its_subject(run, store_dir):
    texts = LOGIN[:4] + ["Thanks!", "You're welcome."] + BILLING[2:4]
    topics = topics_of(run, texts)
    assert topics[4] == topics[5] == topics[0] != topics[6]


DOCKER = ["我的 Docker 容器启动后马上退出，日志里什么都没有。",
          "Docker 容器马上退出通常是因为主进程结束了：请用 docker logs 和 docker inspect 查看退出码。",
          "docker inspect 显示退出码是 137。",
          "退出码 137 表示 Docker 容器被 OOM 杀掉了：请提高容器的内存限制。"]
INDEX = ["另外，我想問一下資料庫索引的問題：查詢訂單表很慢。",
         "訂單表查詢慢多半是缺少索引：請在常用的查詢欄位上建立資料庫索引。",
         "訂單表的索引要建在哪些欄位？",
         "訂單表的索引建在用戶編號和建立時間這兩個查詢欄位上。"]
DOCKER_AGAIN = ["回到剛才那個問題，Docker 容器的內存限制要設多少？",
                "Docker 容器的內存限制可以先設成 2g，再看容器是否還被殺掉。"]


def test_a_chinese_switch_opens_a_topic_and_a_chinese_return_goes_back(run, store_dir):
    topics = topics_of(run, DOCKER + INDEX + DOCKER_AGAIN)
    assert len(set(topics[:4])) == len(set(topics[4:8])) == len(set(topics[8:])) == 1, topics
    assert topics[0] != topics[4]
    assert topics[8] == topics[0]
