#!/usr/bin/python3
"""Validates a JSON file against a JSON Schema (draft 2020-12; draft 7 with jsonschema < 4).

    tests/validate_json.py SCHEMA FILE

Prints one line per error, "FILE: JSON_PATH: message", and exits 1 if there is any (an unreadable
or malformed file or schema counts as one); exits 0 when FILE is valid.

Relative "$ref"s resolve against the schema file's own location, so
results/results.schema.json can point at ../experiments/descriptor.schema.json.
Needs the jsonschema package (Debian: python3-jsonschema). tests/cli_test.py imports validate().
"""
import argparse
import json
import sys
from pathlib import Path

import jsonschema

try:
    from jsonschema import Draft202012Validator as SchemaValidator
except ImportError:
    # jsonschema < 4 (Ubuntu 22.04 has 3.2) knows drafts up to 7. The schemas use no keyword that
    # draft 7 reads otherwise: their "$defs" are reached by JSON pointer, and the only keywords
    # beside a "$ref" (which draft 7 ignores) are annotations ("default", "description").
    from jsonschema import Draft7Validator as SchemaValidator

MAX_MESSAGE = 400  # messages quote the offending instance; a whole run object helps nobody


def _load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


_VALIDATORS = {}  # (schema file, its mtime) -> validator: one per schema per process


def _validator(schema_path):
    schema_path = Path(schema_path).resolve()
    key = (schema_path, schema_path.stat().st_mtime_ns)
    if key not in _VALIDATORS:
        _VALIDATORS[key] = _make_validator(schema_path)
    return _VALIDATORS[key]


def _make_validator(schema_path):
    schema = _load_json(schema_path)
    SchemaValidator.check_schema(schema)
    # Without an $id the schema's base URI is its file, so relative $refs find sibling files.
    schema = dict(schema)
    schema.setdefault("$id", schema_path.as_uri())
    try:  # jsonschema >= 4.18 resolves references through a `referencing` registry
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT202012

        def retrieve(uri):
            if not uri.startswith("file://"):
                raise LookupError(f"{uri}: only file references are resolved")
            return Resource.from_contents(_load_json(uri[len("file://"):]),
                                          default_specification=DRAFT202012)

        return SchemaValidator(schema, registry=Registry(retrieve=retrieve))
    except ImportError:  # older jsonschema (Debian 12 has 4.10) fetches file:// URIs itself
        return SchemaValidator(schema)


def _one_line(text):
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + " ..."


def _json_path(error):
    """The instance location as "$.a[0].b" (jsonschema >= 4 has it as error.json_path)."""
    if hasattr(error, "json_path"):
        return error.json_path
    path = "$"
    for part in error.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def validate(schema_path, instance):
    """Error lines ("JSON_PATH: message") for `instance` against the schema file; [] if valid."""
    errors = _validator(schema_path).iter_errors(instance)
    return [f"{_json_path(e)}: {_one_line(e.message)}"
            for e in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path])]


def validate_file(schema_path, file_path):
    """Error lines for the JSON file against the schema file; [] if valid."""
    try:
        instance = _load_json(file_path)
    except (OSError, ValueError) as e:
        return [f"$: cannot read JSON: {_one_line(e)}"]
    return validate(schema_path, instance)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("schema", help="JSON Schema file (draft 2020-12)")
    parser.add_argument("file", help="JSON file to validate")
    args = parser.parse_args(argv)
    try:
        errors = validate_file(args.schema, args.file)
    except (OSError, ValueError, jsonschema.exceptions.SchemaError,
            jsonschema.exceptions.RefResolutionError) as e:
        print(f"{args.schema}: bad schema: {_one_line(e)}", file=sys.stderr)
        return 1
    for line in errors:
        print(f"{args.file}: {line}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
