// Drives openprof's web UI in headless Chromium for the CLI's tests: one scenario per run,
// printing what the pages showed as JSON.
//
// node ui.mjs URL SCENARIO [ARGS...]   (credentials in OPENPROF_UI_TOKEN, OPENPROF_UI_NAME)
//   refused                      a wrong credential, and no credential at all
//   fleet [NAME=VALUE]           the fleet's rows; with a label, a click on its chip, and the rows left
//   flame AGENT                  the agent's flame graph: search shares, live growth, a click
//   statistics AGENT             the statistics tab: methods, threads
//   mpt AGENT SPEC               add a specification from Controls, then the values table
//   snapshot AGENT NAME          take a snapshot
//   diff                         compare the first and the last snapshot
//   actions                      the action log
//   fleet-profile PLAN           the fleet's profile from ClickHouse: PLAN is JSON, {searches:
//                                [REGEX], loads: [{service, sampleLabels, event, seconds, compare,
//                                bucket, top, method, callsTop, shot, refused: STATUS}]}; each load
//                                fills the form (refused: the status it expects instead of a page),
//                                loads, and reads the flame graph's total and search shares, the top
//                                table, and the traced values and calls tables;
//                                {absent: true}: a collector without ClickHouse, no such section
// With --screenshots DIR each page is saved there as ui-*.png.
//
// OPENPROF_BROWSER_DEPS: the directory whose node_modules holds playwright-core (default: this
// script's own); CHROMIUM: the browser (default /usr/bin/chromium).
import { createRequire } from "node:module";
import path from "node:path";

const deps = process.env.OPENPROF_BROWSER_DEPS || path.dirname(new URL(import.meta.url).pathname);
const { chromium } = createRequire(path.join(path.resolve(deps), "package.json"))("playwright-core");

const args = process.argv.slice(2);
let screenshots = null;
const at = args.indexOf("--screenshots");
if (at >= 0) { screenshots = args[at + 1]; args.splice(at, 2); }
const [base, scenario, ...rest] = args;
const token = process.env.OPENPROF_UI_TOKEN || "";
const name = process.env.OPENPROF_UI_NAME || "tester";

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: process.getuid && process.getuid() === 0 ? ["--no-sandbox"] : [],
});
const result = { errors: [], requests: [] };
const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
page.on("pageerror", (error) => result.errors.push(String(error)));
// A status a step provokes on purpose, whose console message is no error of the page's.
let provoked = null;
page.on("console", (message) => {
  // Refusals the scenario provokes on purpose are not the page's errors.
  const refusal = (scenario === "refused" && message.text().includes("status of 401"))
    || (provoked !== null && message.text().includes("status of " + provoked));
  if (message.type() === "error" && !refusal) result.errors.push(message.text());
});
page.on("request", (request) => { if (!request.url().startsWith(base)) result.requests.push(request.url()); });
page.on("dialog", (dialog) => dialog.accept());
const shot = async (file, fullPage) => { if (screenshots) await page.screenshot({ path: path.join(screenshots, file), fullPage: Boolean(fullPage) }); };

async function login() {
  await page.goto(base + "/login");
  await page.fill("#token", token);
  await page.fill("#name", name);
  await Promise.all([page.waitForURL(base + "/"), page.click("#submit")]);
}

// The flame graph frame's page, once its drawing is there.
async function flameFrame(selector) {
  const handle = await page.waitForSelector(selector);
  const frame = await handle.contentFrame();
  await frame.waitForFunction(() => window.openprofFlame && window.openprofFlame.rects.length > 0);
  return frame;
}

try {
  if (scenario === "refused") {
    // No credential: the page goes to the login page; the API answers 401 with no data.
    await page.goto(base + "/");
    result.redirectedTo = new URL(page.url()).pathname;
    const api = await page.evaluate(async () => {
      const response = await fetch("/api/fleet");
      return { status: response.status, body: await response.text() };
    });
    result.apiStatus = api.status;
    result.apiBody = api.body;
    await shot("ui-login.png");
    // A wrong credential: refused, on the login page, and still no data.
    await page.fill("#token", token + "-wrong");
    await page.click("#submit");
    await page.waitForSelector("#refused");
    result.refused = await page.textContent("#refused");
    result.afterRefusal = await page.evaluate(async () => (await fetch("/api/fleet")).status);
  } else if (scenario === "fleet") {
    await login();
    await page.waitForSelector("#fleet tbody tr");
    const rows = () => page.$$eval("#fleet tbody tr", (rows) => rows.map((row) => ({
      agent: row.dataset.agent,
      text: row.cells[0].textContent,
      labels: [...row.cells[2].querySelectorAll(".chip")].map((chip) => chip.dataset.name + "=" + chip.dataset.value),
      status: row.cells[4].textContent,
    })));
    result.agents = await rows();
    await shot("ui-fleet.png");
    // A click on a label's chip filters the fleet by that label.
    const [label] = rest;
    if (label) {
      const [labelName, labelValue] = label.split("=");
      await page.click(`#fleet .chip[data-name="${labelName}"][data-value="${labelValue}"]`);
      await page.waitForFunction((label) => document.getElementById("fleet-filter").value === "label:" + label
        && [...document.querySelectorAll("#fleet tbody tr")].every((row) =>
          [...row.querySelectorAll(".chip")].some((chip) => chip.dataset.name + "=" + chip.dataset.value === label)), label);
      result.filter = await page.inputValue("#fleet-filter");
      result.filtered = await rows();
    }
  } else if (scenario === "flame") {
    const [agent] = rest;
    await login();
    await page.goto(base + "/#/agent/" + agent + "/flame");
    let frame = await flameFrame("#flame-frame");
    // The page shows what was stored at once, then the live agent's fresh dump in place.
    await page.waitForSelector('#live-count[data-state="ready"]', { timeout: 30000 });
    result.searches = {};
    for (const text of ["CpuSplit\\.heavy", "CpuSplit\\.light"]) {
      await frame.fill("#search", text);
      result.searches[text] = Number(await frame.$eval("#matched", (element) => element.dataset.share));
    }
    await frame.fill("#search", "");
    await shot("ui-flame.png");
    // Live: the count grows while the JVM runs, without the page being loaded again.
    await page.check("#live");
    const totals = [];
    const marker = await page.evaluate(() => { window.notReloaded = true; return true; });
    for (let i = 0; i < 3; i++) {
      await page.waitForTimeout(2500);
      totals.push(Number(await frame.$eval("#total", (element) => element.dataset.total)));
    }
    result.liveTotals = totals;
    result.pageKept = marker && await page.evaluate(() => window.notReloaded === true);
    await page.uncheck("#live");
    // A click on a frame shows every statistic of that method beside the graph.
    const target = await frame.evaluate(() => {
      const rects = window.openprofFlame.rects.filter((rect) => rect.name === "CpuSplit.heavy");
      rects.sort((a, b) => b.w - a.w);
      const top = document.getElementById("flame").getBoundingClientRect().top + window.scrollY;
      window.scrollTo(0, top + rects[0].y - window.innerHeight / 2);
      return { x: rects[0].x + rects[0].w / 2, y: rects[0].y + rects[0].h / 2 };
    });
    const canvas = await frame.$("#flame");
    const box = await canvas.boundingBox();
    await page.mouse.click(box.x + target.x, box.y + target.y);
    await page.waitForSelector("#resource-name");
    result.resource = await page.textContent("#resource-name");
    result.resourceEvents = await page.$$eval(".resource-event", (items) => items.map((item) => item.textContent));
    result.resourceCallers = await page.$$eval("#resource-callers tbody tr", (rows) => rows.map((row) => row.dataset.name));
    await shot("ui-resource.png");
    // Another tab and back: the flame graph's page is the same one, not loaded again.
    await frame.fill("#search", "CpuSplit\\.light");
    await frame.evaluate(() => { window.keptAcrossTabs = true; });
    await page.click("#tab-methods");
    await page.waitForSelector("#methods tbody tr");
    result.flameHiddenOnMethods = await page.$eval("#flame-pane", (pane) => pane.hidden);
    await page.click("#tab-flame");
    await page.waitForSelector("#flame-frame", { state: "visible" });
    frame = await (await page.$("#flame-frame")).contentFrame();
    result.flameKeptAcrossTabs = await frame.evaluate(() => window.keptAcrossTabs === true
      && document.getElementById("search").value === "CpuSplit\\.light");
  } else if (scenario === "statistics") {
    const [agent] = rest;
    await login();
    await page.goto(base + "/#/agent/" + agent + "/statistics");
    await page.waitForSelector("#stats-methods tbody tr");
    result.methods = await page.$$eval("#stats-methods tbody tr", (rows) => rows.map((row) => ({
      name: row.dataset.name, self: Number(row.cells[1].textContent.replace(/,/g, "")),
    })));
    await shot("ui-statistics.png");
    await page.selectOption("#stats-kind", "threads");
    await page.waitForSelector("#stats-threads tbody tr");
    result.threads = await page.$$eval("#stats-threads tbody tr", (rows) => rows.map((row) => ({
      name: row.dataset.name, cpu: Number(row.cells[1].textContent.replace(/,/g, "")),
    })));
    await shot("ui-threads.png");
  } else if (scenario === "mpt") {
    const [agent, spec] = rest;
    await login();
    await page.goto(base + "/#/agent/" + agent + "/controls");
    await page.waitForSelector("#command");
    await page.selectOption("#command", "mpt-add");
    await page.fill("#argument", spec);
    await page.click("#send");
    await page.waitForFunction(() => document.getElementById("command-result").textContent.length > 0);
    result.commandResult = await page.textContent("#command-result");
    await shot("ui-controls.png");
    await page.goto(base + "/#/agent/" + agent + "/mpt");
    // The values come with the agent's next dumps (the MPT tab asks every few seconds).
    const deadline = Date.now() + 120000;
    let values = [];
    while (Date.now() < deadline) {
      await page.evaluate(async (id) => {
        await fetch("/api/agents/" + id + "/live", { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
      }, agent);
      values = await page.$$eval(".mpt-method tbody tr", (rows) => rows.map((row) => ({
        value: row.dataset.value, calls: Number(row.cells[1].textContent.replace(/,/g, "")), mean: Number(row.cells[2].textContent),
      })));
      if (values.length >= 2 && values.every((value) => value.calls >= 3)) break;
      await page.waitForTimeout(1000);
    }
    result.values = values;
    await shot("ui-mpt.png");
    // What the tab shows (an error, or no data yet) when the values never came.
    result.mptPage = await page.textContent("#mpt");
    if (!values.some((value) => value.value === '"slow"')) throw new Error("no value \"slow\" in the table: " + result.mptPage);
    // A value: its calls over time, and the CPU profile of the samples inside its calls.
    await page.evaluate(() => [...document.querySelectorAll(".mpt-method tbody tr")].find((row) => row.dataset.value === '"slow"').click());
    await page.waitForSelector("#mpt-value");
    result.slowCalls = await page.$$eval("#mpt-calls tbody tr", (rows) => rows.reduce((sum, row) => sum + Number(row.cells[1].textContent.replace(/,/g, "")), 0));
    result.chartBars = await page.$$eval("#mpt-chart rect.calls", (bars) => bars.length);
    const valueFrame = await flameFrame("#mpt-flame");
    result.valueProfile = {};
    for (const text of ["Phases\\.handle", "Phases\\.spin", "Phases\\.alpha|Phases\\.beta"]) {
      await valueFrame.fill("#search", text);
      result.valueProfile[text] = Number(await valueFrame.$eval("#matched", (element) => element.dataset.share));
    }
    await valueFrame.fill("#search", "");
    result.valueTotal = Number(await valueFrame.$eval("#total", (element) => element.dataset.total));
    await shot("ui-mpt-value.png");
  } else if (scenario === "snapshot") {
    const [agent, snapshotName] = rest;
    await login();
    await page.goto(base + "/#/agent/" + agent + "/snapshot");
    await page.waitForSelector("#snapshot-name");
    await page.fill("#snapshot-name", snapshotName);
    await Promise.all([page.waitForURL(base + "/#/snapshots"), page.click("#snapshot-take")]);
    await page.waitForSelector("#snapshots tbody tr");
    result.snapshots = await page.$$eval("#snapshots tbody tr", (rows) => rows.map((row) => row.cells[0].textContent));
  } else if (scenario === "diff") {
    await login();
    await page.goto(base + "/#/snapshots");
    await page.waitForSelector("#snapshots tbody tr");
    await shot("ui-snapshots.png");
    const count = await page.$$eval("#diff-base option", (options) => options.length);
    await page.selectOption("#diff-base", { index: 0 });
    await page.selectOption("#diff-new", { index: count - 1 });
    await page.click("#diff-show");
    const frame = await flameFrame("#diff-frame");
    await shot("ui-diff.png");
    await frame.click("#tree-tab");
    // Every row of the tree opened, to find each method's change of share.
    for (let round = 0; round < 20; round++) {
      const closed = await frame.$$("#tree tbody tr .toggle[aria-expanded=\"false\"]");
      if (!closed.length) break;
      for (const toggle of closed) await toggle.click();
    }
    result.rows = await frame.$$eval("#tree tbody tr", (rows) => rows.map((row) => ({
      name: row.dataset.name, change: Number(row.dataset.change), total: Number(row.dataset.total),
    })));
    await page.waitForSelector("#diff-methods tbody tr");
    result.deltas = await page.$$eval("#diff-methods tbody tr", (rows) => rows.map((row) => ({
      name: row.dataset.name, change: Number(row.dataset.change),
    })));
  } else if (scenario === "actions") {
    await login();
    await page.goto(base + "/#/actions");
    await page.waitForSelector("#actions");
    result.actions = await page.$$eval("#actions tbody tr", (rows) => rows.map((row) => [...row.cells].map((cell) => cell.textContent)));
    await shot("ui-actions.png");
  } else if (scenario === "fleet-profile") {
    const plan = JSON.parse(rest[0]);
    await login();
    if (plan.absent) {
      // Without ClickHouse the page links no such section, and says why when asked for it.
      await page.waitForFunction(() => document.getElementById("who").textContent !== "");
      result.navShown = await page.isVisible("#nav-fleet-profile");
      await page.goto(base + "/#/fleet-profile");
      result.absentText = await page.textContent("#fp-absent");
    } else {
      await page.waitForSelector("#nav-fleet-profile", { state: "visible" });
      result.navShown = true;
      await page.click("#nav-fleet-profile");
      await page.waitForSelector("#fp-form");
      result.events = await page.$$eval("#fp-event option", (options) => options.map((option) => option.value));
      result.loads = [];
      for (const load of plan.loads) {
        await page.fill("#fp-service", load.service || "");
        await page.fill("#fp-sample-labels", (load.sampleLabels || []).join("\n"));
        await page.selectOption("#fp-event", load.event || "cpu");
        await page.fill("#fp-seconds", String(load.seconds));
        await page.fill("#fp-compare", load.compare ? String(load.compare) : "");
        await page.fill("#fp-bucket", String(load.bucket || 60));
        await page.fill("#fp-top", String(load.top || 5));
        await page.fill("#fp-method", load.method || "");
        await page.fill("#fp-calls-top", String(load.callsTop || 20));
        provoked = load.refused || null;
        await page.click("#fp-load");
        await page.waitForSelector('#fp-status[data-state="ready"], #fp-status[data-state="failed"]', { state: "attached", timeout: 60000 });
        const seen = { state: await page.getAttribute("#fp-status", "data-state"), error: await page.textContent("#fp-error") };
        if (seen.state === "ready") {
          const frame = await flameFrame("#fp-frame");
          seen.title = await frame.title();
          seen.total = Number(await frame.$eval("#total", (element) => element.dataset.total));
          seen.baseTotal = await frame.evaluate(() => window.openprofFlame.baseTotal);
          seen.shares = {};
          for (const text of plan.searches) {
            await frame.fill("#search", text);
            seen.shares[text] = Number(await frame.$eval("#matched", (element) => element.dataset.share));
          }
          await frame.fill("#search", "");
          seen.top = await page.$$eval("#fleet-top tbody tr[data-method]", (rows) => rows.map((row) => ({
            time: row.dataset.time, method: row.dataset.method, value: Number(row.dataset.value),
          })));
          seen.topOthers = await page.$$eval("#fleet-top tbody tr[data-others]", (rows) => rows.map((row) => ({
            time: row.dataset.time, value: Number(row.dataset.others), text: row.cells[1].textContent,
          })));
        }
        // The tables of calls, drawn whether or not the flame graph came: in the order shown,
        // with the value's cell as the page shows it (text).
        seen.values = await page.$$eval("#fleet-values tbody tr", (rows) => rows.map((row) => ({
          method: row.dataset.method, value: row.dataset.value, valueText: row.cells[3].textContent,
          calls: Number(row.dataset.calls), cpuMean: Number(row.dataset.cpuMean),
        })));
        seen.calls = await page.$$eval("#fleet-calls tbody tr", (rows) => rows.map((row) => ({
          method: row.dataset.method, calls: Number(row.dataset.calls),
        })));
        provoked = null;
        // The whole page: the flame graph and the tables below it.
        if (load.shot) await shot(load.shot, true);
        result.loads.push(seen);
      }
    }
  } else {
    throw new Error("unknown scenario " + scenario);
  }
} catch (error) {
  result.errors.push("scenario " + scenario + ": " + (error && error.stack ? error.stack : String(error)));
} finally {
  await browser.close();
}
console.log(JSON.stringify(result));
