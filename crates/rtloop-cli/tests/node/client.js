// The official Foxglove TypeScript client (@foxglove/ws-protocol, from npm) against rtloop's
// Foxglove server, opened as its README shows. Run by crates/rtloop-cli/tests/cli/foxglove_node.rs:
//
//   node client.js URL SUBPROTOCOLS CYCLES
//
// SUBPROTOCOLS: a comma-separated offer ("readme": the README's, FoxgloveClient's own name
// alone). Subscribes to every JSON channel, validates every payload against the JSON schema
// its channel advertises (ajv, draft 2020-12) and every foxglove.* payload against Foxglove's
// own JSON schema of that name (@foxglove/schemas), and checks that each rtloop.* schema
// refuses a payload missing a field. Keeps samples of the 3D view's messages (the body's
// transform with its log time, the scene's primitives) for the test to check against the log.
// Ends after CYCLES /cycle messages (or 60 s) with one JSON line on stdout; exit 0 when every
// check passed.
"use strict";

const { FoxgloveClient } = require("@foxglove/ws-protocol");
const { WebSocket } = require("ws");
const Ajv2020 = require("ajv/dist/2020").default;
const foxgloveSchemas = require("@foxglove/schemas/jsonschema");

const [url, offer, wanted] = process.argv.slice(2);
const protocols = offer === "readme" ? [FoxgloveClient.SUPPORTED_SUBPROTOCOL] : offer.split(",");
const cyclesWanted = Number(wanted || 20);

const ajv = new Ajv2020({ strict: false, allErrors: true });
const result = {
  offered: protocols,
  negotiated: null,
  serverName: null,
  channels: {},
  counts: {},
  invalid: [],
  missingFieldAccepted: [],
  missingFieldChecked: [],
  officialChecked: [],
  officialInvalid: [],
  samples: { bodyTransforms: [], modelTransforms: null, scene: null },
  errors: [],
};
const officialValidators = new Map(); // schema name -> validate (Foxglove's own schema)
const validators = new Map(); // subscription id -> { topic, validate, schemaName }
const decoder = new TextDecoder();
let done = false;

function finish(code) {
  if (done) {
    return;
  }
  done = true;
  process.stdout.write(JSON.stringify(result) + "\n");
  try {
    if (client) {
      client.close();
    }
  } catch (_) {
    // closing an unopened socket
  }
  // Leave stdout time to flush, then exit whatever the socket does.
  setTimeout(() => process.exit(code), 100);
}

// The server may still be starting: a refused connection (nothing reached it) is tried
// again, each time as the README opens one.
const deadline = Date.now() + 30000;
let client = null;
let opened = false;
function connect() {
  const ws = new WebSocket(url, protocols);
  ws.on("upgrade", (res) => {
    result.negotiated = res.headers["sec-websocket-protocol"] || null;
  });
  ws.on("open", () => {
    opened = true;
  });
  ws.on("unexpected-response", (_req, res) => {
    result.errors.push(`HTTP ${res.statusCode} ${res.statusMessage}`);
    finish(1);
  });
  ws.on("error", (e) => {
    if (!opened && e.code === "ECONNREFUSED" && Date.now() < deadline) {
      setTimeout(connect, 50);
    }
  });
  client = new FoxgloveClient({ ws });
  client.on("error", (e) => {
    if (!opened && e && e.code === "ECONNREFUSED" && Date.now() < deadline) {
      return; // tried again above
    }
    const message = String(e && e.message ? e.message : e);
    // ws-protocol 0.8.0 (the latest on npm) predates the playbackControl capability that
    // `rtloop log serve` offers: it reports the server's playbackState messages (opcode 5,
    // which the Foxglove app reads) as unrecognized and carries on. Counted, not a failure.
    if (message === "Unrecognized server opcode in binary message: 5") {
      result.playbackStates = (result.playbackStates || 0) + 1;
      return;
    }
    result.errors.push(message);
    finish(1);
  });
  client.on("close", () => {
    if (opened) {
      finish(cyclesDone() ? 0 : 1);
    }
  });
  listen(client);
}

function listen(client) {
client.on("serverInfo", (info) => {
  result.serverName = info.name;
});
client.on("advertise", (channels) => {
  for (const ch of channels) {
    result.channels[ch.topic] = ch.schemaName;
    if (ch.encoding !== "json" || (ch.schemaEncoding !== undefined && ch.schemaEncoding !== "jsonschema")) {
      result.errors.push(`${ch.topic}: encoding ${ch.encoding}/${ch.schemaEncoding}`);
      continue;
    }
    let validate;
    try {
      validate = ajv.compile(JSON.parse(ch.schema));
    } catch (e) {
      result.errors.push(`${ch.topic}: schema does not compile: ${e.message}`);
      continue;
    }
    let official = null;
    if (ch.schemaName.startsWith("foxglove.")) {
      const name = ch.schemaName.slice("foxglove.".length);
      if (!foxgloveSchemas[name]) {
        result.errors.push(`${ch.topic}: Foxglove has no schema named ${ch.schemaName}`);
        continue;
      }
      if (!officialValidators.has(ch.schemaName)) {
        officialValidators.set(ch.schemaName, ajv.compile(foxgloveSchemas[name]));
      }
      official = officialValidators.get(ch.schemaName);
    }
    const id = client.subscribe(ch.id);
    validators.set(id, { topic: ch.topic, validate, official, schemaName: ch.schemaName });
  }
});
client.on("message", ({ subscriptionId, timestamp, data }) => {
  const sub = validators.get(subscriptionId);
  if (!sub) {
    result.errors.push(`message for unknown subscription ${subscriptionId}`);
    return;
  }
  const payload = JSON.parse(decoder.decode(data));
  result.counts[sub.topic] = (result.counts[sub.topic] || 0) + 1;
  if (!sub.validate(payload)) {
    result.invalid.push({ topic: sub.topic, errors: sub.validate.errors });
  }
  if (sub.official) {
    if (!result.officialChecked.includes(sub.schemaName)) {
      result.officialChecked.push(sub.schemaName);
    }
    if (!sub.official(payload) && result.officialInvalid.length < 10) {
      result.officialInvalid.push({ topic: sub.topic, errors: sub.official.errors.slice(0, 5) });
    }
  }
  sample(sub.topic, timestamp, payload);
  // Every rtloop.* message sends every field: each is required, so leaving one out fails.
  if (sub.schemaName.startsWith("rtloop.") && !result.missingFieldChecked.includes(sub.schemaName)) {
    result.missingFieldChecked.push(sub.schemaName);
    for (const key of Object.keys(payload)) {
      const partial = { ...payload };
      delete partial[key];
      if (sub.validate(partial)) {
        result.missingFieldAccepted.push(`${sub.schemaName}.${key}`);
      }
    }
  }
  if (cyclesDone()) {
    finish(result.invalid.length || result.missingFieldAccepted.length || result.errors.length ? 1 : 0);
  }
});

}

// What the test compares with the log: the body's last 400 poses with their log time (ns, as a
// string), the last pose of every body, and what the scene draws.
function sample(topic, timestamp, payload) {
  const s = result.samples;
  if (topic === "/imu/transform") {
    s.bodyTransforms.push({ logTime: String(timestamp), translation: payload.translation, rotation: payload.rotation });
    if (s.bodyTransforms.length > 400) {
      s.bodyTransforms.shift();
    }
  } else if (topic === "/model/transforms") {
    s.modelTransforms = { logTime: String(timestamp), transforms: payload.transforms };
  } else if (topic === "/model/scene" && !s.scene) {
    const count = (k) => payload.entities.reduce((n, e) => n + e[k].length, 0);
    s.scene = {
      entities: payload.entities.map((e) => e.frame_id),
      cubes: count("cubes"),
      spheres: count("spheres"),
      cylinders: count("cylinders"),
      triangles: count("triangles"),
    };
  }
}

// Done once enough cycles came and every subscribed channel that flows every cycle has
// delivered: the subscriptions are sent together but take effect one by one, and a lockstep
// run is fast enough to send the cycles wanted before the last one takes effect.
function cyclesDone() {
  if ((result.counts["/cycle"] || 0) < cyclesWanted) {
    return false;
  }
  for (const { topic } of validators.values()) {
    if (topic !== "/events" && !result.counts[topic]) {
      return false;
    }
  }
  return true;
}

connect();
setTimeout(() => {
  result.errors.push("timed out");
  finish(1);
}, 60000);
