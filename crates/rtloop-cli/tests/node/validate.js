// Foxglove's own JSON schemas (@foxglove/schemas, from npm) as the judge of messages written
// elsewhere than the WebSocket (an MCAP export): reads JSON lines {"schema": "foxglove.X",
// "payload": {...}} on stdin, validates each payload against Foxglove's schema of that name
// (ajv, draft 2020-12), and prints one JSON line {"checked": {name: count}, "invalid": [...],
// "unknown": [...]}; exit 0 when every payload validated. Run by
// crates/rtloop-cli/tests/cli/scene.rs.
"use strict";

const Ajv2020 = require("ajv/dist/2020").default;
const foxgloveSchemas = require("@foxglove/schemas/jsonschema");

const ajv = new Ajv2020({ strict: false, allErrors: true });
const validators = new Map();
const result = { checked: {}, invalid: [], unknown: [] };
let input = "";
process.stdin.on("data", (d) => (input += d));
process.stdin.on("end", () => {
  for (const line of input.split("\n")) {
    if (!line.trim()) {
      continue;
    }
    const { schema, payload } = JSON.parse(line);
    const name = schema.startsWith("foxglove.") ? schema.slice("foxglove.".length) : null;
    if (!name || !foxgloveSchemas[name]) {
      if (!result.unknown.includes(schema)) {
        result.unknown.push(schema);
      }
      continue;
    }
    if (!validators.has(name)) {
      validators.set(name, ajv.compile(foxgloveSchemas[name]));
    }
    const validate = validators.get(name);
    result.checked[schema] = (result.checked[schema] || 0) + 1;
    if (!validate(payload) && result.invalid.length < 10) {
      result.invalid.push({ schema, errors: validate.errors.slice(0, 5) });
    }
  }
  process.stdout.write(JSON.stringify(result) + "\n");
  process.exit(result.invalid.length || result.unknown.length ? 1 : 0);
});
