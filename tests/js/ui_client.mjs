// ui_client.mjs - drive the HTTP front door with the REAL AI SDK UI client.
//
// Usage (from the Python tests, as a subprocess; after `npm ci --prefix tests/js`):
//   node tests/js/ui_client.mjs < request.json
//
// stdin: ONE JSON object
//   {
//     "version": 6 | 7,                        // which `ai` major: imports "ai6" or "ai7"
//     "api": "http://127.0.0.1:PORT/api/chat",
//     "action": "send" | "resume",             // resume = GET {api}/{chatId}/stream
//     "chatId": "...",
//     "trigger": "submit-message" | "regenerate-message",   // send only (default submit-message)
//     "messageId": "...",                      // optional, send only
//     "messages": [UIMessage, ...],            // send only; the Python side passes them back in
//     "body": {...},                           // optional extra body fields (send only)
//     "headers": {...},                        // optional request headers
//     "continueFrom": UIMessage,               // optional: assistant message to continue
//                                              //   (readUIMessageStream's `message`)
//     "abortAfterChunks": N,                   // optional: after N chunks, abort the fetch
//                                              //   (AbortController) and stop reading
//     "timeoutMs": N                           // optional: abort everything after N ms
//   }
//
// stdout: ONE JSON line
//   {
//     "status": 200 | 204 | <HTTP status of an error response> | null (no response),
//     "chunks": [UIMessageChunk, ...],         // every chunk the transport produced, in order
//     "message": UIMessage | null,             // LAST message yielded by readUIMessageStream
//     "error": null | {"name", "message", ...},// transport / stream / `error` chunk error
//     "aborted": bool,                         // true when abortAfterChunks/timeoutMs fired
//     "responseHeaders": {...} | null          // headers of the HTTP response
//   }
// Exit code 0; non-zero only for harness bugs (bad input, unexpected crash).
//
// The stream from DefaultChatTransport is teed: every chunk is recorded (to the end of
// the response, even after the assembler stopped on an error) and fed to
// readUIMessageStream({stream, message: continueFrom, onError, terminateOnError: true}).
// Note: readUIMessageStream yields only on chunks that change the message, so e.g. a
// trailing `start-step` (no content after it) is missing from "message".

import process from 'node:process';

function fail(msg) {
  process.stderr.write(`ui_client.mjs: ${msg}\n`);
  process.exit(2);
}

const MAX_ERROR_MESSAGE = 2000;

function describeError(err) {
  if (err == null) return { name: 'Error', message: String(err) };
  if (typeof err !== 'object') return { name: 'Error', message: String(err) };
  let message = String(err.message ?? err);
  // Zod validation messages list every union member; keep the head (it names the value).
  if (message.length > MAX_ERROR_MESSAGE) {
    message = message.slice(0, MAX_ERROR_MESSAGE) + '...(truncated)';
  }
  const out = { name: err.name ?? err.constructor?.name ?? 'Error', message };
  // Extra fields of AI SDK errors that tests may want to assert on.
  for (const key of ['statusCode', 'responseBody', 'chunkType', 'chunkId']) {
    if (err[key] !== undefined) out[key] = err[key];
  }
  if (err.cause !== undefined && err.cause !== null) {
    out.cause = String(err.cause?.message ?? err.cause);
  }
  return out;
}

async function readStdin() {
  const parts = [];
  for await (const part of process.stdin) parts.push(part);
  return Buffer.concat(parts).toString('utf8');
}

async function main() {
  let req;
  try {
    req = JSON.parse(await readStdin());
  } catch (e) {
    fail(`stdin is not one JSON object: ${e.message}`);
  }
  if (req == null || typeof req !== 'object') fail('stdin is not a JSON object');

  const version = Number(req.version ?? 7);
  if (version !== 6 && version !== 7) fail(`unsupported version ${req.version}`);
  const action = req.action ?? 'send';
  if (action !== 'send' && action !== 'resume') fail(`unknown action ${req.action}`);
  if (typeof req.api !== 'string') fail('"api" is required');
  if (typeof req.chatId !== 'string') fail('"chatId" is required');

  const ai = await import(version === 6 ? 'ai6' : 'ai7');
  const { DefaultChatTransport, readUIMessageStream } = ai;

  const result = {
    status: null,
    chunks: [],
    message: null,
    error: null,
    aborted: false,
    responseHeaders: null,
  };

  // Record the HTTP status/headers of the request the transport makes. The transport
  // calls `this.fetch ?? globalThis.fetch`, so wrapping globalThis.fetch does not change
  // what it sends.
  const realFetch = globalThis.fetch;
  globalThis.fetch = async (...args) => {
    const response = await realFetch(...args);
    result.status = response.status;
    result.responseHeaders = Object.fromEntries(response.headers.entries());
    return response;
  };

  const abortController = new AbortController();
  let timer;
  if (req.timeoutMs != null) {
    timer = setTimeout(() => {
      result.aborted = true;
      if (result.error == null) {
        result.error = { name: 'TimeoutError', message: `timed out after ${req.timeoutMs} ms` };
      }
      abortController.abort();
    }, Number(req.timeoutMs));
  }

  const transport = new DefaultChatTransport({ api: req.api, headers: req.headers });

  let stream;
  try {
    if (action === 'send') {
      stream = await transport.sendMessages({
        trigger: req.trigger ?? 'submit-message',
        chatId: req.chatId,
        messageId: req.messageId ?? undefined,
        messages: req.messages ?? [],
        abortSignal: abortController.signal,
        body: req.body ?? undefined,
      });
    } else {
      stream = await transport.reconnectToStream({
        chatId: req.chatId,
        abortSignal: abortController.signal,
      });
      if (stream == null) {
        result.status = 204;
        return result;
      }
    }
  } catch (err) {
    // HTTP 4xx/5xx (v6: Error(body text); v7: APICallError), connection refused, ...
    if (result.error == null) result.error = describeError(err);
    return result;
  }

  const abortAfter = req.abortAfterChunks == null ? null : Number(req.abortAfterChunks);
  const stopEarly = () => {
    result.aborted = true;
    abortController.abort();
  };

  // Tee: a recorder loop reads the transport's stream to its end and records every
  // chunk; it hands each chunk on, through a pull-based queue, to readUIMessageStream.
  // So `chunks` is everything the server sent, even after the assembler stopped on an
  // error, and the assembler sees every queued chunk before a transport error.
  const queue = [];
  let ended = null; // {error?} once the recorder stops
  let wake = null;
  const notify = () => {
    if (wake) {
      const w = wake;
      wake = null;
      w();
    }
  };
  const assemblerInput = new ReadableStream(
    {
      async pull(controller) {
        while (queue.length === 0 && ended == null) {
          await new Promise(resolve => (wake = resolve));
        }
        if (queue.length > 0) controller.enqueue(queue.shift());
        else if (ended.error !== undefined) controller.error(ended.error);
        else controller.close();
      },
    },
    { highWaterMark: 0 },
  );

  const recorder = (async () => {
    const reader = stream.getReader();
    try {
      if (abortAfter === 0) {
        // Abort right after the response headers arrived, before reading any chunk.
        stopEarly();
        await reader.cancel().catch(() => {});
        return;
      }
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        result.chunks.push(value);
        queue.push(value);
        notify();
        if (abortAfter != null && result.chunks.length >= abortAfter) {
          // The assembler gets exactly these N chunks and a clean end; then the
          // connection is torn down like a closed browser tab.
          stopEarly();
          await reader.cancel().catch(() => {});
          return;
        }
      }
    } catch (err) {
      ended = { error: err }; // parse/validation errors, network errors, our abort
    } finally {
      if (ended == null) ended = {};
      notify();
    }
  })();

  let firstStreamError = null;
  try {
    for await (const message of readUIMessageStream({
      stream: assemblerInput,
      message: req.continueFrom ?? undefined,
      onError: err => {
        if (firstStreamError == null) firstStreamError = err;
      },
      terminateOnError: true,
    })) {
      result.message = message;
    }
  } catch (err) {
    if (firstStreamError == null) firstStreamError = err;
  }
  await recorder;

  if (firstStreamError != null && result.error == null) {
    // Our own abort surfaces as an AbortError; anything else (an `error` chunk,
    // UIMessageStreamError, validation errors) is reported even after an abort.
    const isOurAbort = result.aborted && firstStreamError?.name === 'AbortError';
    if (!isOurAbort) result.error = describeError(firstStreamError);
  }
  if (timer) clearTimeout(timer);
  return result;
}

main().then(
  result => {
    process.stdout.write(JSON.stringify(result) + '\n', () => process.exit(0));
  },
  err => {
    process.stderr.write(`ui_client.mjs: harness crashed: ${err?.stack ?? err}\n`);
    process.exit(1);
  },
);
