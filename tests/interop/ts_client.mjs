// Drive a nimblemcp server with the official TypeScript client (@modelcontextprotocol/client
// v2); print one JSON object. Run from a folder where that package is installed
// (tests/_peers.py makes .cache/npm-peers/), with NODE_PATH unused: the import resolves from
// INTEROP_NODE_MODULES.
//
//   node ts_client.mjs MODE SCENARIO URL
//   node ts_client.mjs MODE SCENARIO -- COMMAND ARG...
//
// MODE: "auto" or "legacy" (versionNegotiation.mode) or a version to pin. SCENARIO: "target"
// (tests/interop/nimble_server.py) or "docs" (examples/docs_server/server.py). A stdio server
// gets the SDK's default environment plus the JSON object in $INTEROP_SERVER_ENV.

import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const modules = process.env.INTEROP_NODE_MODULES;
const require = createRequire(path.join(path.resolve(modules), 'noop.js'));
const load = async (spec) => import(pathToFileURL(require.resolve(spec)).href);
const { Client, StreamableHTTPClientTransport } = await load('@modelcontextprotocol/client');
const { StdioClientTransport, getDefaultEnvironment } = await load('@modelcontextprotocol/client/stdio');

const [mode, scenario, ...rest] = process.argv.slice(2);
const out = {};

function transportFor() {
  if (rest[0] === '--') {
    const env = { ...getDefaultEnvironment(), ...JSON.parse(process.env.INTEROP_SERVER_ENV || '{}') };
    return new StdioClientTransport({ command: rest[1], args: rest.slice(2), env, stderr: 'ignore' });
  }
  return new StreamableHTTPClientTransport(new URL(rest[0]));
}

async function step(name, fn) {
  try {
    out[name] = await fn();
  } catch (err) {
    out[name] = { error: String(err && err.stack ? err.stack : err).slice(0, 2000) };
  }
}

async function target(client) {
  await step('tools', async () => (await client.listTools()).tools.map((t) => t.name).sort());
  await step('add', () => client.callTool({ name: 'add', arguments: { a: 2, b: 40 } }));
  await step('weather', () => client.callTool({ name: 'weather', arguments: { city: 'Lisbon' } }));
  const progress = [];
  await step('slow_count', () =>
    client.callTool({ name: 'slow_count', arguments: { n: 3 } }, {
      onprogress: (p) => progress.push([p.progress, p.total, p.message]),
    }));
  out.progress = progress;
  await step('ask_colour', () => client.callTool({ name: 'ask_colour', arguments: {} }));
  await step('fail', () => client.callTool({ name: 'fail', arguments: { reason: 'nope' } }));
  await step('resources', async () => (await client.listResources()).resources.map((r) => r.uri));
  await step('templates', async () =>
    (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate));
  await step('readme', () => client.readResource({ uri: 'notes://readme' }));
  await step('topic', () => client.readResource({ uri: 'notes://topics/alpha' }));
  await step('prompts', async () => (await client.listPrompts()).prompts.map((p) => p.name));
  await step('prompt', () => client.getPrompt({ name: 'review', arguments: { topic: 'beta' } }));
  await step('complete_prompt', () => client.complete({
    ref: { type: 'ref/prompt', name: 'review' }, argument: { name: 'topic', value: 'al' },
  }));
  await step('complete_template', () => client.complete({
    ref: { type: 'ref/resource', uri: 'notes://topics/{topic}' }, argument: { name: 'topic', value: 'b' },
  }));
}

async function docs(client) {
  await step('tools', async () => (await client.listTools()).tools.map((t) => t.name).sort());
  await step('list_docs', () => client.callTool({ name: 'list_docs', arguments: {} }));
  await step('read_doc', () => client.callTool({ name: 'read_doc', arguments: { name: 'brief.md' } }));
  await step('templates', async () =>
    (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate));
  await step('document', () => client.readResource({ uri: 'docs://brief.md' }));
  await step('prompt', () => client.getPrompt({ name: 'review_brief', arguments: {} }));
  await step('start_review', () =>
    client.callTool({ name: 'start_review', arguments: { document: 'brief.md' } }));
  const handle = out.start_review?.content?.[0]?.text;
  await step('add_comment', () =>
    client.callTool({ name: 'add_comment', arguments: { review: handle, comment: 'Add a budget.' } }));
  await step('finish_review', () =>
    client.callTool({ name: 'finish_review', arguments: { review: handle } }));
}

// docs_server watching $DOCS_DIR: an edited document and an added one reach listeners.
async function listen(client) {
  const docsDir = JSON.parse(process.env.INTEROP_SERVER_ENV).DOCS_DIR;
  const events = [];
  let wake = null;
  const arrived = (kind, uri) => {
    events.push([kind, uri ?? null]);
    if (wake) wake();
  };
  const waitFor = (pred) => new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no event after 30 s: ${JSON.stringify(events)}`)), 30000);
    const check = () => {
      if (events.some(pred)) {
        clearTimeout(timer);
        wake = null;
        resolve();
      }
    };
    wake = check;
    check();
  });
  client.setNotificationHandler('notifications/resources/updated', (n) => arrived('updated', n.params.uri));
  client.setNotificationHandler('notifications/resources/list_changed', () => arrived('list_changed'));
  const sub = await client.listen({ resourcesListChanged: true, resourceSubscriptions: ['docs://brief.md'] });
  out.honored = sub.honoredFilter;
  const brief = path.join(docsDir, 'brief.md');
  writeFileSync(brief, readFileSync(brief, 'utf8') + '\nEdited.\n');
  await waitFor((e) => e[0] === 'updated' && e[1] === 'docs://brief.md');
  writeFileSync(path.join(docsDir, 'added.md'), '# Added\n');
  await waitFor((e) => e[0] === 'list_changed');
  out.events = events;
  out.resources = (await client.listResources(undefined, { cacheMode: 'refresh' })).resources
    .map((r) => r.uri).sort();
  await sub.close();
  out.closed = await sub.closed;
}

const negotiation = mode === 'auto' || mode === 'legacy' ? { mode } : { mode: { pin: mode } };
const client = new Client(
  { name: 'interop-ts', version: '1.0.0' },
  { capabilities: { elicitation: { form: {} } }, versionNegotiation: negotiation },
);
client.setRequestHandler('elicitation/create', async (request) => {
  const message = request.params.message || '';
  return message.includes('colour')
    ? { action: 'accept', content: { colour: 'teal' } }
    : { action: 'accept', content: { publish: true } };
});

try {
  await client.connect(transportFor());
  out.protocol_version = client.getNegotiatedProtocolVersion();
  out.server_name = client.getServerVersion()?.name;
  await ({ target, docs, listen })[scenario](client);
} catch (err) {
  out.error = String(err && err.stack ? err.stack : err).slice(0, 4000);
} finally {
  try {
    await client.close();
  } catch (err) {
    out.close_error = String(err);
  }
}
process.stdout.write(JSON.stringify(out) + '\n');
process.exit(0);
