#!/usr/bin/python3
"""The JSON Schemas read the same under draft 7 as under draft 2020-12.

tests/validate_json.py checks with draft 2020-12 where jsonschema has it (>= 4: Debian 12,
Ubuntu 24.04) and with draft 7 where it does not (Ubuntu 22.04 has 3.2). The two agree on a
schema that uses no keyword whose meaning differs between them:
  * beside a "$ref", draft 7 ignores every other keyword, so only annotations may sit there;
  * "items" as a list means a tuple in draft 7 and is invalid in 2020-12 ("prefixItems");
  * keywords new since draft 7 ("prefixItems", "unevaluatedProperties", "dependentRequired", ...)
    are ignored by draft 7, so a schema must not rely on them.
This test holds both schemas to that, and, where the installed jsonschema has both drafts,
checks that a few bad descriptors get the same errors, at the same places, from both.

    tests/schema_drafts_test.py --source-dir SRC
"""
import argparse
import json
import sys
import unittest
from pathlib import Path

SOURCE_DIR = None
SCHEMAS = ["experiments/descriptor.schema.json", "results/results.schema.json"]
ANNOTATIONS = {"$ref", "$comment", "description", "default", "title", "examples", "deprecated"}
NEWER_THAN_DRAFT7 = {"prefixItems", "unevaluatedProperties", "unevaluatedItems",
                     "dependentRequired", "dependentSchemas", "minContains", "maxContains",
                     "$anchor", "$dynamicRef", "$dynamicAnchor", "$recursiveRef",
                     "$recursiveAnchor", "$vocabulary"}
# Keys whose values are maps of names to schemas, not schemas: their keys are names, not keywords.
NAME_MAPS = {"properties", "$defs", "definitions", "patternProperties"}


def draft_differences(schema, where="$"):
    """Lines naming each place where draft 7 would read `schema` otherwise than 2020-12."""
    found = []
    if isinstance(schema, dict):
        if "$ref" in schema:
            extra = sorted(set(schema) - ANNOTATIONS)
            if extra:
                found.append(f"{where}: {extra} beside $ref (draft 7 ignores them)")
        for key in sorted(set(schema) & NEWER_THAN_DRAFT7):
            found.append(f"{where}: {key} (not in draft 7)")
        if isinstance(schema.get("items"), list):
            found.append(f"{where}: items as a list (a tuple in draft 7)")
        for key, value in schema.items():
            if key in NAME_MAPS and isinstance(value, dict):
                for name, sub in value.items():
                    found += draft_differences(sub, f"{where}.{key}.{name}")
            elif key not in ("const", "enum", "default", "examples"):
                found += draft_differences(value, f"{where}.{key}")
    elif isinstance(schema, list):
        for i, sub in enumerate(schema):
            found += draft_differences(sub, f"{where}[{i}]")
    return found


class SchemaDrafts(unittest.TestCase):
    def test_the_schemas_use_nothing_draft7_reads_otherwise(self):
        for rel in SCHEMAS:
            with self.subTest(schema=rel):
                schema = json.loads((SOURCE_DIR / rel).read_text())
                self.assertEqual(draft_differences(schema), [])

    def test_the_check_finds_each_difference(self):
        # The checker itself: each kind of difference is reported, nested ones too.
        bad = {"properties": {"a": {"$ref": "#/$defs/x", "minimum": 1},
                              "b": {"items": [{"type": "string"}]},
                              "c": {"anyOf": [{"prefixItems": []}]}}}
        lines = draft_differences(bad)
        self.assertEqual(len(lines), 3, lines)
        self.assertIn("$.properties.a: ['minimum'] beside $ref", lines[0])
        self.assertEqual(draft_differences({"properties": {"items": {"type": "array"}}}), [])

    def test_both_drafts_find_the_same_errors(self):
        try:
            from jsonschema import Draft7Validator, Draft202012Validator
        except ImportError:
            self.skipTest("jsonschema < 4 has no draft 2020-12 to compare with")
        schema_path = SOURCE_DIR / "experiments" / "descriptor.schema.json"
        schema = json.loads(schema_path.read_text())
        valid = json.loads((SOURCE_DIR / "experiments" / "quickstart.json").read_text())
        cases = {
            "valid": valid,
            "unknown key": {**valid, "runz": []},
            "wrong type": {**valid, "runs": "all"},
            "bad training": {**valid, "training": {"epochs": -1, "batch_size": "256"}},
            "bad limit": {**valid, "dataset": {"train_limit": 0}},
        }
        for name, doc in cases.items():
            with self.subTest(case=name):
                locations = []
                for validator in (Draft7Validator(schema), Draft202012Validator(schema)):
                    locations.append(sorted(
                        (list(map(str, e.absolute_path)), e.validator)
                        for e in validator.iter_errors(doc)))
                self.assertEqual(locations[0], locations[1])
                if name != "valid":
                    self.assertNotEqual(locations[0], [], f"{name}: no error found")

    def test_the_json_path_built_for_jsonschema_3_matches_jsonschema_4s(self):
        # validate_json.py builds "$.a[0].b" itself where errors have no json_path (< 4).
        try:
            from jsonschema import Draft202012Validator
        except ImportError:
            self.skipTest("jsonschema < 4 has no json_path to compare with")
        sys.path.insert(0, str(SOURCE_DIR / "tests"))
        from validate_json import _json_path

        schema = json.loads((SOURCE_DIR / "experiments" / "descriptor.schema.json").read_text())
        valid = json.loads((SOURCE_DIR / "experiments" / "quickstart.json").read_text())
        doc = {**valid, "runs": [valid["runs"][0], {**valid["runs"][0], "devices": "two"}],
               "training": {**valid["training"], "epochs": "2"}}
        errors = list(Draft202012Validator(schema).iter_errors(doc))
        self.assertGreaterEqual(len(errors), 2)
        for error in errors:
            bare = type("Bare", (), {"absolute_path": error.absolute_path})()
            self.assertEqual(_json_path(bare), error.json_path)


def main():
    global SOURCE_DIR
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source-dir", required=True)
    args, rest = ap.parse_known_args()
    SOURCE_DIR = Path(args.source_dir).resolve()
    unittest.main(module=__name__, argv=[sys.argv[0], *rest])


if __name__ == "__main__":
    main()
