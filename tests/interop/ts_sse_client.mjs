// Drive a nimblemcp server's 2024-11-05 HTTP+SSE transport (`/sse`) with an official
// TypeScript client's SSEClientTransport; print one JSON object of results.
//
//   node ts_sse_client.mjs PACKAGE URL
//
// PACKAGE is "@modelcontextprotocol/sdk" (v1: `client/index.js` + `client/sse.js`) or
// "@modelcontextprotocol/client" (v2: both from the package root), resolved from
// $INTEROP_NODE_MODULES (tests/_peers.py installs them under .cache/). The target is
// tests/interop/nimble_server.py.

import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const modules = process.env.INTEROP_NODE_MODULES;
const require = createRequire(path.join(path.resolve(modules), 'noop.js'));
const load = async (spec) => import(pathToFileURL(require.resolve(spec)).href);

const [pkg, url] = process.argv.slice(2);
const out = {};

async function step(name, fn) {
  try {
    out[name] = await fn();
  } catch (err) {
    out[name] = { error: String(err && err.stack ? err.stack : err).slice(0, 2000) };
  }
}

try {
  let Client, SSEClientTransport, ElicitRequestSchema;
  const v1 = pkg === '@modelcontextprotocol/sdk';
  if (v1) {
    ({ Client } = await load('@modelcontextprotocol/sdk/client/index.js'));
    ({ SSEClientTransport } = await load('@modelcontextprotocol/sdk/client/sse.js'));
    ({ ElicitRequestSchema } = await load('@modelcontextprotocol/sdk/types.js'));
  } else {
    ({ Client, SSEClientTransport } = await load('@modelcontextprotocol/client'));
  }
  const client = new Client({ name: 'sse-interop', version: '1.0.0' }, { capabilities: { elicitation: {} } });
  const answer = () => ({ action: 'accept', content: { colour: 'teal' } });
  if (ElicitRequestSchema) client.setRequestHandler(ElicitRequestSchema, answer);
  else client.setRequestHandler('elicitation/create', answer);
  await client.connect(new SSEClientTransport(new URL(url)));
  out.server_name = client.getServerVersion()?.name;
  await step('tools', async () => (await client.listTools()).tools.map((t) => t.name).sort());
  await step('add', () => client.callTool({ name: 'add', arguments: { a: 2, b: 40 } }));
  const progress = [];
  const onprogress = (p) => progress.push([p.progress, p.total, p.message]);
  const params = { name: 'slow_count', arguments: { n: 3 } };
  await step('slow_count', () => (v1  // v1: callTool(params, resultSchema, options)
    ? client.callTool(params, undefined, { onprogress })
    : client.callTool(params, { onprogress })));
  out.progress = progress;
  await step('ask_colour', () => client.callTool({ name: 'ask_colour', arguments: {} }));
  await step('readme', () => client.readResource({ uri: 'notes://readme' }));
  await client.close();
} catch (err) {
  out.error = String(err && err.stack ? err.stack : err).slice(0, 3000);
}
console.log(JSON.stringify(out));
process.exit(0);
