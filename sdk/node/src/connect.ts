import { readFileSync } from "node:fs";
import path from "node:path";

import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";

/** ConnectOptions say where and as whom a worker connects. */
export interface ConnectOptions {
  /** NATS server URLs (default $NATS_URL, else nats://127.0.0.1:4222). */
  servers?: string | string[];
  /** The NATS user (default $NATS_USER). */
  user?: string;
  /** Its password (default $NATS_PASSWORD). */
  pass?: string;
  /** A NATS credentials file (default $NATS_CREDS), instead of user and password. */
  credsFile?: string;
  /**
   * The inbox prefix: AX's NATS users may receive replies only under
   * "_INBOX_<user>" (default that, for the user given; "_INBOX" without one).
   */
  inboxPrefix?: string;
  /** The connection's name, as the server's monitoring shows it (default "ax-executor-node"). */
  name?: string;
}

/** inboxPrefix is the inbox prefix AX's permissions give user (streams/natsauth InboxPrefix). */
export function inboxPrefix(user: string): string {
  return "_INBOX_" + user;
}

/**
 * connectExecutor connects to NATS as an AX executor user, with the
 * options given or, for each one left out, the NATS CLI's environment
 * variables (NATS_URL, NATS_USER, NATS_PASSWORD, NATS_CREDS).
 */
export async function connectExecutor(opts: ConnectOptions = {}): Promise<NatsConnection> {
  const env = process.env;
  const servers = opts.servers ?? (env.NATS_URL ? env.NATS_URL.split(",") : "nats://127.0.0.1:4222");
  const user = opts.user ?? env.NATS_USER;
  const pass = opts.pass ?? env.NATS_PASSWORD;
  const credsFile = opts.credsFile ?? env.NATS_CREDS;
  const prefix = opts.inboxPrefix ?? (user ? inboxPrefix(user) : env.AX_NATS_INBOX_PREFIX);
  try {
    return await connect({
      servers,
      name: opts.name ?? "ax-executor-node",
      ...(credsFile ? { authenticator: credsAuthenticator(readFileSync(credsFile)) } : { user, pass }),
      ...(prefix ? { inboxPrefix: prefix } : {}),
      maxReconnectAttempts: -1,
    });
  } catch (err) {
    throw new Error(`connect to NATS at ${String(servers)}${user ? " as " + user : ""}: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * devExecutorCredentials reads the NATS user of worker workerId that `ax dev`
 * keeps in <dataDir>/nats-workers.json, for ConnectOptions. Every executor
 * user of ax dev is one worker's, for the handlers it names: add one with
 * `ax user add executor --ax-dev <dataDir> --pool default --worker <workerId>
 * --handler <name>` (each handler the worker serves), which the running ax dev
 * admits at once.
 */
export function devExecutorCredentials(dataDir: string, workerId: string): { user: string; pass: string; inboxPrefix: string } {
  const file = path.join(dataDir, "nats-workers.json");
  let users: Array<{ name: string; password: string }>;
  try {
    users = JSON.parse(readFileSync(file, "utf8")) as Array<{ name: string; password: string }>;
  } catch (err) {
    throw new Error(`read ax dev's worker users from ${file}: ${(err as Error).message}; start \`ax dev --data ${dataDir}\` first`, { cause: err });
  }
  const name = "executor-" + workerId;
  const u = users.find((x) => x.name === name);
  if (!u) {
    throw new Error(`${file} has no user for worker ${workerId}: add it with \`ax user add executor --ax-dev ${dataDir} --pool default --worker ${workerId} --handler NAME\` (each handler it serves)`);
  }
  return { user: name, pass: u.password, inboxPrefix: inboxPrefix(name) };
}
