'use strict';
// The warm Stormbuffer daemon, asked straight from Node.js: one `sbuf invoke context` request over
// the daemon's Unix socket (its hello + invoke protocol), without starting a Python process. It
// answers only when every check holds; null otherwise, and the caller then runs `sbuf` itself.
//
// Checks, as strict as Python's doors: the runtime directory is the user's own and private (0700),
// the socket and the daemon's identity file are the user's own and private (a socket there can
// only have been made by this user), and the daemon belongs to the install the caller would run:
// the `sbuf` command's interpreter lives where the daemon's does, the package file the daemon
// stamped at its start is unchanged (an upgrade rewrites it) and the idle time matches. Node.js
// cannot read the peer's credentials (SO_PEERCRED); the ownership of the directory stands for it.
const { closeSync, lstatSync, openSync, readFileSync, readSync, realpathSync, statSync } = require('node:fs');
const { connect } = require('node:net');
const path = require('node:path');

const PROTOCOL = 'stormbuffer-daemon/1';
const MAX_SOCKET_PATH = 100;
const MAX_IDENTITY_BYTES = 65536;
const MAX_REPLY_BYTES = 1 << 20;
const DEFAULT_IDLE_S = 900;
// The variables that select stores and check output, forwarded with the hello (runtime.SESSION_ENV).
const SESSION_ENV = ['HOME', 'USERPROFILE', 'XDG_DATA_HOME', 'XDG_CACHE_HOME', 'STORMBUFFER_VALIDATE_OUTPUT',
  'STORMBUFFER_LOCK_WAIT', 'STORMBUFFER_DATABASE_URL'];

const uid = () => (typeof process.getuid === 'function' ? process.getuid() : null);

/** Whether `file` is a `kind` (`isFile`, …) of this user's that others cannot use, at most `maxSize` bytes. */
function ownPrivate(file, kind, maxSize = Infinity) {
  try {
    const info = lstatSync(file);
    return info[kind]() && info.uid === uid() && (info.mode & 0o077) === 0 && info.size <= maxSize;
  } catch {
    return false;
  }
}

function isDirectory(file) {
  try {
    return statSync(file).isDirectory();
  } catch {
    return false;
  }
}

/** Where the daemon's runtime directory is for `env` (runtime.runtime_directory), or null. */
function runtimeDirectory(env) {
  const base = env.XDG_RUNTIME_DIR;
  if (base && path.isAbsolute(base) && isDirectory(base)) return path.join(base, 'stormbuffer');
  const home = env.HOME || env.USERPROFILE;
  const cache = env.XDG_CACHE_HOME || (home ? path.join(home, '.cache') : '');
  return cache && path.isAbsolute(cache) ? path.join(cache, 'stormbuffer', 'run') : null;
}

function disabled(env) {
  const value = env.STORMBUFFER_NO_DAEMON;
  return (value !== undefined && value !== '' && value !== '0') || uid() === null || process.platform === 'win32';
}

/** The idle time `env` asks for (runtime.idle_seconds), or null when Node.js cannot read it as Python does. */
function idleSeconds(env) {
  const raw = env.STORMBUFFER_DAEMON_IDLE_S;
  if (raw === undefined) return DEFAULT_IDLE_S;
  if (!/^\s*\d+(\.\d+)?\s*$/.test(raw)) return null;
  const value = Number(raw);
  return value > 0 ? value : DEFAULT_IDLE_S;
}

/** The file `command` runs: itself when it holds a slash, else its first executable match on PATH. */
function resolveCommand(command, env) {
  if (command.includes('/')) return path.resolve(command);
  for (const directory of (env.PATH || '').split(path.delimiter)) {
    if (!path.isAbsolute(directory)) continue;
    const candidate = path.join(directory, command);
    try {
      if (statSync(candidate).isFile()) return candidate;
    } catch {
      // not here
    }
  }
  return null;
}

/** The directory of the interpreter a script's `#!` line names (resolved), or null. */
function interpreterDirectory(script) {
  let fd;
  try {
    fd = openSync(realpathSync(script), 'r');
    const head = Buffer.alloc(512);
    const line = head.subarray(0, readSync(fd, head, 0, head.length, 0)).toString('utf8').split('\n')[0];
    const match = /^#!(\/\S+)\s*$/.exec(line);
    return match === null ? null : realpathSync(path.dirname(match[1]));
  } catch {
    return null;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

function stampOf(file) {
  try {
    const info = statSync(file, { bigint: true });
    return [String(info.ino), String(info.size), String(info.mtimeNs)];
  } catch {
    return null;
  }
}

/**
 * The daemon to ask for `command` in `env`: {socket, install}, or null when there is none to use
 * (disabled, no private runtime directory, no socket, or a daemon of another install).
 */
function findDaemon(command, env) {
  if (disabled(env) || env.PYTHONPATH) return null;
  const directory = runtimeDirectory(env);
  if (directory === null || !ownPrivate(directory, 'isDirectory')) return null;
  const socket = path.join(directory, 'daemon.sock');
  const identityFile = path.join(directory, 'daemon.identity');
  if (Buffer.byteLength(socket) > MAX_SOCKET_PATH || !ownPrivate(socket, 'isSocket')) return null;
  if (!ownPrivate(identityFile, 'isFile', MAX_IDENTITY_BYTES)) return null;
  let record;
  try {
    record = JSON.parse(readFileSync(identityFile, 'utf8'));
  } catch {
    return null;
  }
  if (typeof record !== 'object' || record === null || typeof record.install !== 'string') return null;
  if (record.idle_s !== idleSeconds(env) || typeof record.package !== 'string') return null;
  const script = resolveCommand(command, env);
  if (script === null || interpreterDirectory(script) !== record.scripts) return null;
  const stamp = stampOf(path.join(record.package, '__init__.py'));
  if (stamp === null || JSON.stringify(stamp) !== JSON.stringify(record.stamp)) return null;
  return { socket, install: record.install };
}

/** The hello of one `invoke` request (relay.hello): the door, the install, cwd and the selecting env. */
function invokeHello({ install, operation, view, cwd, env, length }) {
  const selected = {};
  for (const name of SESSION_ENV) if (env[name] !== undefined) selected[name] = env[name];
  return { protocol: PROTOCOL, install, door: 'invoke', cwd, env: selected, operation, view, length };
}

/**
 * Ask the daemon one `invoke` request: `{sent, line, ok}` (`sent`: the daemon accepted it and it
 * must not run again), or `{sent: false}` when it was not taken (nothing listens, a refused or
 * unexpected hello, the deadline). The payload follows the hello at once, saving a round trip: the
 * daemon reads it only after accepting the hello. A reply past MAX_REPLY_BYTES ends the connection.
 */
function askDaemon(daemon, hello, payload, { timeoutMs }) {
  return new Promise((resolve) => {
    let settled = false;
    let sent = false;
    let buffered = Buffer.alloc(0);
    const socket = connect(daemon.socket);
    const finish = (value) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(value);
    };
    const timer = setTimeout(() => finish({ sent }), timeoutMs);
    socket.on('error', () => finish({ sent }));
    socket.on('connect', () => socket.write(Buffer.concat([Buffer.from(`${JSON.stringify(hello)}\n`), payload])));
    socket.on('data', (chunk) => {
      buffered = Buffer.concat([buffered, chunk]);
      if (buffered.length > MAX_REPLY_BYTES) return finish({ sent });
      if (sent) return undefined;
      const end = buffered.indexOf(10);
      if (end < 0) return undefined;
      let reply;
      try {
        reply = JSON.parse(buffered.subarray(0, end).toString('utf8'));
      } catch {
        return finish({ sent });
      }
      if (typeof reply !== 'object' || reply === null || reply.ok !== true) return finish({ sent });
      buffered = buffered.subarray(end + 1);
      sent = true;
      return undefined;
    });
    socket.on('end', () => {
      if (!sent) return finish({ sent });
      let answer;
      try {
        answer = JSON.parse(buffered.toString('utf8'));
      } catch {
        return finish({ sent });
      }
      const valid = typeof answer === 'object' && answer !== null && typeof answer.line === 'string';
      return finish(valid ? { sent, line: answer.line, ok: answer.ok === true } : { sent });
    });
  });
}

module.exports = {
  PROTOCOL,
  MAX_SOCKET_PATH,
  runtimeDirectory,
  findDaemon,
  invokeHello,
  askDaemon,
  isDirectory,
};
