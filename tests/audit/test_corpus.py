"""The audit's proof: each script of the corpus (corpus.json) gives exactly the
findings it must, and no others, audited as a user would audit it
(--nproc-per-node 2 --epochs 2 --reruns 2). A finding a clean script gives is
a defect of the audit.

    PYTHONPATH=build/python $(scripts/pyenv.sh --path)/bin/python -m pytest tests/audit
"""
import importlib.util
import json
import os

import pytest

import volshard.audit as audit

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "corpus.json")) as f:
    CORPUS = json.load(f)["entries"]


def _id(entry):
    return " ".join([entry["script"][:-3]] + [a for a in entry["args"] if not a.startswith("{tmp}")])


def _compiled():
    try:
        return importlib.util.find_spec("volshard._volshard") is not None
    except ImportError:
        return False


def test_the_corpus_names_every_kind_it_proves():
    expected = {k for e in CORPUS for k in e["expect"]}
    # Every kind the audit reports is made on purpose at least once.
    assert expected == set(audit.KINDS), sorted(set(audit.KINDS) - expected)


@pytest.mark.parametrize("entry", CORPUS, ids=_id)
def test_corpus_script_gives_exactly_its_findings(entry, tmp_path, capsys):
    if entry.get("needs") == "compiled" and not _compiled():
        pytest.skip("volshard's compiled module is not importable here (build it: make python; PYTHONPATH="
                    "build/python)")
    args = [a.replace("{tmp}", str(tmp_path)) for a in entry["args"]]
    out = tmp_path / "audit.json"
    status = audit.main(["--nproc-per-node", "2", "--json", str(out), os.path.join(HERE, entry["script"])] + args)
    printed = capsys.readouterr()
    assert status != 2, f"the script could not be audited:\n{printed.err[-3000:]}"
    with open(out) as f:
        doc = json.load(f)
    kinds = sorted({f["kind"] for f in doc["findings"]})
    assert kinds == sorted(entry["expect"]), printed.out
    assert status == entry["status"], printed.out
    with open(tmp_path / "audit.txt") as f:
        assert f.read() == printed.out  # the report beside the JSON is the one printed
