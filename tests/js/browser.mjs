// Drives the chat page (durable_turns/web/static/index.html) in headless Chromium, for the
// Python tests. Reads a JSON spec on stdin:
//
//   {"url": "http://127.0.0.1:PORT/?chat=ID", "timeoutMs": 30000, "steps": [
//      {"do": "type", "text": "hello"},           fill the message box
//      {"do": "send"},                            click Send
//      {"do": "press", "key": "Enter"},           a key in the message box
//      {"do": "waitText", "contains": "...", "role": "assistant"?, "gone": false?}
//                                                 a message's text has it (role optional;
//                                                 gone: true waits until none has it)
//      {"do": "waitStatus", "is": "ready"}        the status line is exactly that
//      {"do": "waitStatus", "startsWith": "error"}   (or "contains")
//      {"do": "waitTool", "state": "approval-requested", "count": 1?}
//      {"do": "waitMessages", "count": 2, "role": "assistant"?}
//      {"do": "waitTestid", "testid": "regenerate", "gone": false?}
//      {"do": "click", "testid": "approve", "index": -1?}   the last one unless index says
//      {"do": "reload"}, {"do": "goto", "url": "..."}
//      {"do": "sleep", "ms": 500}
//      {"do": "evaluate", "js": "fetch(...)"}     run an expression in the page (not awaited
//                                                 when it is a promise: e.g. another tab's POST)
//      {"do": "snapshot"}                         the rendered messages, from the DOM
//      {"do": "screenshot", "path": "/tmp/x.png"} a PNG of the page (debugging)
//   ]}
//
// Every step waits up to timeoutMs (the spec's, or the step's own "timeoutMs"). Prints one
// JSON line: {"ok", "error", "failedStep", "snapshots": [{status, messages: [{id, role,
// text, tools: [{id, name, state}], errors, stopped}]}], "final": snapshot on failure, "console":
// the page's console errors and uncaught exceptions, "network": Chromium's "Failed to load
// resource" lines (one per non-2xx response, e.g. a 501 the page shows as an error),
// "responses": every response the page's requests got, [{url, method, status}], as
// Chromium's network layer saw it (also an opaque no-cors one the page cannot read)}. Exit code 0 when ok, 1 when a step
// failed, 2 when the spec could not be read or the browser not started.
//
// The browser is Debian's /usr/bin/chromium (CHROMIUM_PATH overrides); nothing is downloaded.

import { chromium } from "playwright-core";

const CHROMIUM = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
const ARGS = [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
];

function emit(result, code) {
  process.stdout.write(JSON.stringify(result) + "\n", () => process.exit(code));
}

async function readStdin() {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

const sel = (testid) => `[data-testid="${testid}"]`;

// What the page shows, read from the DOM only.
function domSnapshot() {
  const q = (root, id) => [...root.querySelectorAll(`[data-testid="${id}"]`)];
  return {
    status: document.querySelector('[data-testid="status"]')?.textContent ?? null,
    messages: q(document, "message").map((m) => ({
      id: m.dataset.id,
      role: m.dataset.role,
      text: q(m, "text").map((t) => t.textContent).join(""),
      tools: q(m, "tool").map((t) => ({ id: t.dataset.toolCallId, name: t.dataset.toolName, state: t.dataset.state })),
      errors: q(m, "error").map((e) => e.textContent),
      stopped: q(m, "stopped").length > 0,
    })),
  };
}

async function runStep(page, step, timeout, state) {
  const { snapshots } = state;
  switch (step.do) {
    case "type": {
      const box = page.locator(sel("input"));
      await box.waitFor({ state: "visible", timeout });
      await box.fill(String(step.text ?? ""), { timeout });
      return;
    }
    case "send": {
      const b = page.locator(sel("send"));
      await b.waitFor({ state: "visible", timeout });
      await page.waitForFunction((s) => { const e = document.querySelector(s); return e && !e.disabled; }, sel("send"), { timeout });
      await b.click({ timeout });
      return;
    }
    case "press":
      await page.locator(sel("input")).press(String(step.key || "Enter"), { timeout });
      return;
    case "waitText":
      await page.waitForFunction(({ contains, role, gone }) => {
        const ms = [...document.querySelectorAll('[data-testid="message"]')]
          .filter((m) => !role || m.dataset.role === role);
        const has = ms.some((m) => [...m.querySelectorAll('[data-testid="text"]')].map((t) => t.textContent).join("").includes(contains));
        return gone ? !has : has;
      }, { contains: String(step.contains ?? ""), role: step.role ?? null, gone: !!step.gone }, { timeout, polling: 50 });
      return;
    case "waitStatus":
      await page.waitForFunction(({ is, startsWith, contains }) => {
        const t = document.querySelector('[data-testid="status"]')?.textContent ?? "";
        if (is != null) return t === is;
        if (startsWith != null) return t.startsWith(startsWith);
        if (contains != null) return t.includes(contains);
        return true;
      }, { is: step.is ?? null, startsWith: step.startsWith ?? null, contains: step.contains ?? null }, { timeout, polling: 50 });
      return;
    case "waitTool":
      await page.waitForFunction(({ state, count, id }) => {
        const ts = [...document.querySelectorAll('[data-testid="tool"]')]
          .filter((t) => (!state || t.dataset.state === state) && (!id || t.dataset.toolCallId === id));
        return ts.length >= count;
      }, { state: step.state ?? null, count: step.count ?? 1, id: step.id ?? null }, { timeout, polling: 50 });
      return;
    case "waitMessages":
      await page.waitForFunction(({ count, role }) =>
        [...document.querySelectorAll('[data-testid="message"]')].filter((m) => !role || m.dataset.role === role).length === count,
      { count: step.count, role: step.role ?? null }, { timeout, polling: 50 });
      return;
    case "waitTestid":
      await page.locator(sel(step.testid)).first().waitFor({ state: step.gone ? "hidden" : "visible", timeout });
      return;
    case "click": {
      const all = page.locator(`${sel(step.testid)}:visible`);
      await all.first().waitFor({ state: "visible", timeout });
      const n = await all.count();
      const i = step.index == null ? n - 1 : step.index < 0 ? n + step.index : step.index;
      const target = all.nth(i);
      await page.waitForFunction((el) => el && !el.disabled, await target.elementHandle({ timeout }), { timeout });
      await target.click({ timeout });
      return;
    }
    case "reload":
      await page.reload({ waitUntil: "load", timeout });
      return;
    case "goto":
      await page.goto(String(step.url), { waitUntil: "load", timeout });
      return;
    case "sleep":
      await page.waitForTimeout(Number(step.ms ?? 0));
      return;
    case "evaluate":
      await page.evaluate((js) => { (0, eval)(js); }, String(step.js ?? ""));
      return;
    case "screenshot":
      await page.screenshot({ path: String(step.path), fullPage: !!step.fullPage, timeout });
      return;
    case "snapshot":
      snapshots.push(await page.evaluate(domSnapshot));
      return;
    default:
      throw new Error(`unknown step ${JSON.stringify(step.do)}`);
  }
}

async function main() {
  let spec;
  try {
    spec = await readStdin();
    if (!spec || typeof spec.url !== "string" || !Array.isArray(spec.steps)) throw new Error("the spec needs url and steps");
  } catch (e) {
    return emit({ ok: false, error: `bad spec: ${e.message}`, snapshots: [], console: [] }, 2);
  }
  const timeoutMs = Number(spec.timeoutMs ?? 30000);
  const consoleErrors = [];
  const network = [];
  const responses = [];
  const state = { snapshots: [] };
  let browser;
  try {
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS, headless: true, timeout: 60000 });
  } catch (e) {
    return emit({ ok: false, error: `browser did not start: ${e.message}`, snapshots: [], console: [] }, 2);
  }
  let result;
  let page;
  try {
    const context = await browser.newContext();
    page = await context.newPage();
    page.setDefaultTimeout(timeoutMs);
    page.on("console", (m) => {
      if (m.type() !== "error") return;
      // Chromium logs every non-2xx response so: a page that shows an HTTP error is not a bug
      (m.text().startsWith("Failed to load resource") ? network : consoleErrors).push(m.text());
    });
    page.on("response", (r) => responses.push({ url: r.url(), method: r.request().method(), status: r.status() }));
    page.on("requestfailed", (r) => responses.push({ url: r.url(), method: r.method(), status: null, failure: r.failure()?.errorText ?? null }));
    page.on("pageerror", (e) => consoleErrors.push(`pageerror: ${e.message}`));
    await page.goto(spec.url, { waitUntil: "load", timeout: timeoutMs });
    let i = 0;
    try {
      for (; i < spec.steps.length; i++) {
        const step = spec.steps[i] || {};
        await runStep(page, step, Number(step.timeoutMs ?? timeoutMs), state);
      }
      result = { ok: true, error: null, snapshots: state.snapshots, console: consoleErrors, network, responses };
    } catch (e) {
      let final = null;
      try { final = await page.evaluate(domSnapshot); } catch { /* the page is gone */ }
      result = {
        ok: false, error: `step ${i} ${JSON.stringify(spec.steps[i])}: ${String(e.message || e).split("\n")[0]}`,
        failedStep: i, snapshots: state.snapshots, final, console: consoleErrors, network, responses,
      };
    }
  } catch (e) {
    result = { ok: false, error: `page: ${String(e.message || e).split("\n")[0]}`, snapshots: state.snapshots, console: consoleErrors, network, responses };
  } finally {
    await browser.close().catch(() => {});
  }
  emit(result, result.ok ? 0 : 1);
}

main();
