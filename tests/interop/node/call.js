// Calls an osrdyne pool the way any Node service would: amqplib, direct reply-to, nothing of
// osrdyne. Reads a plan (JSON) on stdin:
//   {"url": "...", "exchange": "P-req-xchg", "timeout_ms": 60000,
//    "calls": [{"key": "infra=42", "path": "progress", "body": "..."}]}
// makes the calls one after the other, and prints one JSON line per call: every message
// received for it, in order, as the wire carries it (x-status, the non-terminating flag, the
// correlation id, the body as UTF-8), and the time the final answer took.
'use strict';
const amqp = require('amqplib');
const crypto = require('node:crypto');

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

function header(headers, name) {
  const value = (headers || {})[name];
  return Buffer.isBuffer(value) ? value.toString('utf8') : value;
}

async function main() {
  const plan = await readStdin();
  const connection = await amqp.connect(plan.url);
  const channel = await connection.createChannel();
  const waiting = new Map(); // correlation id -> {messages, done}
  await channel.consume('amq.rabbitmq.reply-to', (msg) => {
    const props = msg.properties;
    const call = waiting.get(props.correlationId);
    if (!call) return;
    const status = header(props.headers, 'x-status');
    const interim = Boolean(header(props.headers, 'x-non-terminating-response'));
    call.messages.push({
      status,
      interim,
      correlation_id: props.correlationId,
      body: msg.content.toString('utf8'),
    });
    if (!interim) call.done();
  }, { noAck: true });
  for (const spec of plan.calls) {
    const correlationId = crypto.randomUUID();
    const call = { messages: [] };
    const finished = new Promise((resolve) => { call.done = resolve; });
    waiting.set(correlationId, call);
    const headers = spec.path ? { 'x-rpc-path': spec.path } : {};
    const began = process.hrtime.bigint();
    channel.publish(plan.exchange, spec.key, Buffer.from(spec.body || '', 'utf8'), {
      replyTo: 'amq.rabbitmq.reply-to',
      correlationId,
      headers,
      mandatory: true,
      persistent: true,
    });
    let timer;
    const expired = new Promise((resolve) => {
      timer = setTimeout(resolve, plan.timeout_ms || 60000, 'timeout');
    });
    const outcome = await Promise.race([finished, expired]);
    clearTimeout(timer); // a pending timer would keep the process alive
    const ms = Number(process.hrtime.bigint() - began) / 1e6;
    waiting.delete(correlationId);
    console.log(JSON.stringify({
      key: spec.key, path: spec.path || null, correlation_id: correlationId,
      timed_out: outcome === 'timeout', ms, messages: call.messages,
    }));
  }
  await channel.close();
  await connection.close();
}

main().catch((err) => { console.error(err); process.exit(1); });
