// The Node.js side of the daemon protocol: which daemon may be asked (its directory, socket and
// identity file are checked) and how one request is asked. The Python suite runs the hooks against
// a real daemon; here one function at a time meets a small socket server speaking the protocol.
import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, writeFileSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import path from 'node:path';
import test from 'node:test';

import { askDaemon, findDaemon, invokeHello, runtimeDirectory } from '../hooks/daemon.cjs';
import { tempDir } from './fixtures.mjs';

/** A runtime directory with a listening socket, an identity file and an `sbuf` of that install. */
async function daemonPlace(answer) {
  const base = tempDir();
  const cache = path.join(base, 'cache');
  const directory = path.join(cache, 'stormbuffer', 'run');
  mkdirSync(directory, { recursive: true, mode: 0o700 });
  chmodSync(directory, 0o700);
  const scripts = path.join(base, 'venv', 'bin');
  const pkg = path.join(base, 'venv', 'stormbuffer');
  mkdirSync(scripts, { recursive: true });
  mkdirSync(pkg, { recursive: true });
  writeFileSync(path.join(scripts, 'python'), '');
  writeFileSync(path.join(pkg, '__init__.py'), '__version__ = "0"\n');
  const sbuf = path.join(scripts, 'sbuf');
  writeFileSync(sbuf, `#!${path.join(scripts, 'python')}\n`, { mode: 0o755 });
  const info = statSync(path.join(pkg, '__init__.py'), { bigint: true });
  const record = { install: 'stormbuffer-daemon/1 test', idle_s: 900, scripts, package: pkg,
    stamp: [String(info.ino), String(info.size), String(info.mtimeNs)] };
  writeFileSync(path.join(directory, 'daemon.identity'), `${JSON.stringify(record)}\n`, { mode: 0o600 });
  const hellos = [];
  const server = createServer((socket) => {
    let buffered = '';
    socket.on('data', (chunk) => {
      buffered += chunk;
      if (hellos.length === 0 && buffered.includes('\n')) {
        const [line, rest] = buffered.split(/\n(.*)/s);
        hellos.push(JSON.parse(line));
        buffered = rest ?? '';
        answer(socket, hellos[0]);
      }
    });
    socket.on('error', () => {});
  });
  const socketPath = path.join(directory, 'daemon.sock');
  await new Promise((resolve) => server.listen(socketPath, resolve));
  chmodSync(socketPath, 0o600);
  const env = { XDG_CACHE_HOME: cache, HOME: base, PATH: scripts };
  return { base, directory, env, sbuf, record, hellos, server };
}

const answers = (socket) => {
  socket.write('{"ok":true,"pid":1}\n');
  socket.end('{"line":"{\\"ok\\":true}","ok":true,"problems":[]}\n');
};

test('the runtime directory follows XDG_RUNTIME_DIR, else the cache', () => {
  const base = tempDir();
  assert.equal(runtimeDirectory({ XDG_RUNTIME_DIR: base }), path.join(base, 'stormbuffer'));
  assert.equal(runtimeDirectory({ XDG_RUNTIME_DIR: 'relative', HOME: base }), path.join(base, '.cache', 'stormbuffer', 'run'));
  assert.equal(runtimeDirectory({ XDG_CACHE_HOME: '/c' }), path.join('/c', 'stormbuffer', 'run'));
  assert.equal(runtimeDirectory({ HOME: 'relative' }), null);
});

test('a daemon of the install `sbuf` belongs to is found and asked', async () => {
  const place = await daemonPlace(answers);
  try {
    const daemon = findDaemon('sbuf', place.env);
    assert.deepEqual(daemon, { socket: path.join(place.directory, 'daemon.sock'), install: place.record.install });
    assert.deepEqual(findDaemon(place.sbuf, place.env), daemon);
    const payload = Buffer.from('{"version":1}\n');
    const hello = invokeHello({ install: daemon.install, operation: 'context', view: 'project', cwd: '/w',
      env: { ...place.env, SECRET: 'x' }, length: payload.length });
    assert.deepEqual(hello.env, { XDG_CACHE_HOME: place.env.XDG_CACHE_HOME, HOME: place.base });
    assert.deepEqual(await askDaemon(daemon, hello, payload, { timeoutMs: 5000 }), { sent: true, line: '{"ok":true}', ok: true });
    assert.equal(place.hellos[0].protocol, 'stormbuffer-daemon/1');
    assert.equal(place.hellos[0].door, 'invoke');
  } finally {
    place.server.close();
  }
});

test('no daemon is used unless every check holds', async () => {
  const place = await daemonPlace(answers);
  try {
    assert.equal(findDaemon('sbuf', { ...place.env, STORMBUFFER_NO_DAEMON: '1' }), null);
    assert.equal(findDaemon('sbuf', { ...place.env, STORMBUFFER_DAEMON_IDLE_S: '60' }), null);
    assert.equal(findDaemon('sbuf', { ...place.env, PYTHONPATH: '/elsewhere' }), null);
    assert.equal(findDaemon('sbuf', { ...place.env, PATH: '/nowhere' }), null);
    writeFileSync(place.sbuf, '#!/bin/sh\n');
    assert.equal(findDaemon('sbuf', place.env), null, 'another interpreter: another install');
    writeFileSync(place.sbuf, `#!${path.join(place.record.scripts, 'python')}\n`);
    assert.notEqual(findDaemon('sbuf', place.env), null);
    writeFileSync(path.join(place.record.package, '__init__.py'), '__version__ = "1"\n');
    assert.equal(findDaemon('sbuf', place.env), null, 'the package changed since the daemon started');
  } finally {
    place.server.close();
  }
  const open = await daemonPlace(answers);
  try {
    chmodSync(open.directory, 0o755);
    assert.equal(findDaemon('sbuf', open.env), null);
    chmodSync(open.directory, 0o700);
    chmodSync(path.join(open.directory, 'daemon.identity'), 0o644);
    assert.equal(findDaemon('sbuf', open.env), null);
    chmodSync(path.join(open.directory, 'daemon.identity'), 0o600);
    chmodSync(path.join(open.directory, 'daemon.sock'), 0o666);
    assert.equal(findDaemon('sbuf', open.env), null);
  } finally {
    open.server.close();
  }
});

test('a refused, silent or oversized answer is not taken', async () => {
  const cases = [
    [(socket) => socket.end('{"ok":false,"reason":"other_install"}\n'), { sent: false }],
    [(socket) => socket.end('not json\n'), { sent: false }],
    [() => {}, { sent: false }],
    [(socket) => { socket.write('{"ok":true}\n'); socket.end('x'.repeat(2 << 20)); }, { sent: true }],
    [(socket) => { socket.write('{"ok":true}\n'); socket.end('{"nope":1}'); }, { sent: true }],
  ];
  for (const [answer, expected] of cases) {
    const place = await daemonPlace(answer);
    try {
      const daemon = findDaemon('sbuf', place.env);
      const hello = invokeHello({ install: daemon.install, operation: 'context', view: 'global', cwd: '/', env: {}, length: 1 });
      assert.deepEqual(await askDaemon(daemon, hello, Buffer.from('x'), { timeoutMs: 300 }), expected);
    } finally {
      place.server.close();
    }
  }
});
