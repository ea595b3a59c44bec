#!/usr/bin/python3
"""Every results file committed under results/reference/ and report/data/ in the current
schema_version matches results/results.schema.json: files from CPU builds and from CUDA-only
builds on a GPU host (no oneDNN among their libraries) alike. Files of older versions keep their
own format; allreduce_bench's files are Google Benchmark's. A run's iterations share one schema,
so each run is checked with its first three and its last (a 10-epoch run holds 2,350; checking
every one took a minute here): the check is for the format, not for every value.

    tests/committed_results_test.py --source-dir SRC

A data check, not a code check: ctest runs it once (sanitize.sh leaves it out).
"""
import argparse
import json
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from validate_json import validate  # noqa: E402

SOURCE_DIR = None


class CommittedResults(unittest.TestCase):
    def test_every_file_of_this_version_matches_the_schema(self):
        schema = SOURCE_DIR / "results" / "results.schema.json"
        current = json.loads(schema.read_text())["properties"]["schema_version"]["const"]
        paths = sorted((SOURCE_DIR / "results" / "reference").rglob("*.json")) + \
            sorted((SOURCE_DIR / "report" / "data").glob("*.json"))
        checked = 0
        for path in paths:
            try:
                doc = json.loads(path.read_text())
            except (ValueError, UnicodeDecodeError):
                continue
            if not isinstance(doc, dict) or doc.get("schema_version") != current or "runs" not in doc:
                continue
            checked += 1
            for run in doc["runs"]:
                its = run.get("iterations") if isinstance(run, dict) else None
                if isinstance(its, list) and len(its) > 4:
                    run["iterations"] = its[:3] + its[-1:]
            with self.subTest(results=str(path.relative_to(SOURCE_DIR))):
                self.assertEqual(validate(schema, doc), [])
        self.assertGreater(checked, 100)


def main():
    global SOURCE_DIR
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source-dir", required=True)
    args, rest = ap.parse_known_args()
    SOURCE_DIR = Path(args.source_dir).resolve()
    unittest.main(module=__name__, argv=[sys.argv[0], *rest])


if __name__ == "__main__":
    main()
