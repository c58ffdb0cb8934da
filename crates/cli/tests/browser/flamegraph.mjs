// Drives openprof's HTML flame graph in a real headless Chromium and prints what the page
// shows, as JSON, for the CLI's test suite to check against the profile's ground truth.
//
// node flamegraph.mjs PAGE.html [--screenshots DIR] [--click NAME] [--search TEXT]...
//                     [--expand NAME]...
//
// OPENPROF_BROWSER_DEPS: the directory whose node_modules holds playwright-core (default: this
// script's own); CHROMIUM: the browser (default /usr/bin/chromium).
import { createRequire } from "node:module";
import path from "node:path";
import { pathToFileURL } from "node:url";

const deps = process.env.OPENPROF_BROWSER_DEPS || path.dirname(new URL(import.meta.url).pathname);
const { chromium } = createRequire(path.join(path.resolve(deps), "package.json"))("playwright-core");

const args = process.argv.slice(2);
const pagePath = args.shift();
const options = { screenshots: null, click: null, searches: [], expand: [] };
while (args.length) {
  const flag = args.shift();
  const value = args.shift();
  if (value === undefined) throw new Error(`${flag} needs a value`);
  if (flag === "--screenshots") options.screenshots = value;
  else if (flag === "--click") options.click = value;
  else if (flag === "--search") options.searches.push(value);
  else if (flag === "--expand") options.expand.push(value);
  else throw new Error(`unknown option ${flag}`);
}
if (!pagePath) throw new Error("usage: flamegraph.mjs PAGE.html [options]");

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  // Root in a container has no user namespaces for Chromium's sandbox.
  args: process.getuid && process.getuid() === 0 ? ["--no-sandbox"] : [],
});
const result = { errors: [], requests: [] };
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.on("pageerror", (error) => result.errors.push(String(error)));
  page.on("console", (message) => {
    if (message.type() === "error") result.errors.push(message.text());
  });
  page.on("request", (request) => {
    if (!request.url().startsWith("file:")) result.requests.push(request.url());
  });
  const shot = async (name) => {
    if (options.screenshots) {
      await page.screenshot({ path: path.join(options.screenshots, name), fullPage: false });
    }
  };
  const started = Date.now();
  await page.goto(pathToFileURL(path.resolve(pagePath)).href);
  await page.waitForFunction(() => window.openprofFlame && window.openprofFlame.rects.length > 0);
  result.loadMillis = Date.now() - started;
  // The page's own time: from its navigation's start to its first drawing.
  result.drawnMillis = await page.evaluate(() => window.openprofFlame.firstDrawnMs);
  // And to the start of the browser's frame that shows it.
  await page.waitForFunction(() => window.openprofFlame.firstFrameMs !== null);
  result.frameMillis = await page.evaluate(() => window.openprofFlame.firstFrameMs);

  result.title = await page.textContent("#title");
  result.documentTitle = await page.title();
  result.events = await page.$$eval("#event option", (items) => items.map((item) => item.value));
  const total = async () => page.$eval("#total", (element) => ({
    event: element.dataset.event,
    value: Number(element.dataset.total),
    unit: element.dataset.unit,
    text: element.textContent,
  }));
  result.total = await total();
  result.legend = await page.$$eval("#legend span", (items) => items.map((item) => item.textContent));
  result.frameCount = await page.evaluate(() => window.openprofFlame.rects.length);
  result.drawnWidth = await page.evaluate(() => window.openprofFlame.rects.reduce((sum, r) => sum + r.w, 0));
  result.firstDrawing = await page.evaluate(() => window.openprofFlame.firstDrawing);
  result.narrowestShare = await page.evaluate(() => Math.min(...window.openprofFlame.rects.map(
    (rect) => 100 * rect.total / window.openprofFlame.rootTotal())));
  result.dataEvents = await page.evaluate(() => window.openprofProfile.events.map((event) => event.name));
  await shot("flamegraph.png");

  // The search: what #matched says, and the share behind it.
  result.searches = {};
  for (const text of options.searches) {
    await page.fill("#search", text);
    result.searches[text] = await page.$eval("#matched", (element) => ({
      text: element.textContent,
      share: Number(element.dataset.share),
    }));
    if (Object.keys(result.searches).length === 1) await shot("flamegraph-search.png");
  }
  await page.fill("#search", "");
  result.matchedAfterClear = await page.textContent("#matched");

  // Hover then click the widest frame of that name: the tooltip, then the zoom.
  if (options.click) {
    // The frame scrolled to the middle of the window, clear of the sticky header.
    const target = await page.evaluate((name) => {
      const rects = window.openprofFlame.rects.filter((rect) => rect.name === name);
      rects.sort((a, b) => b.w - a.w);
      if (!rects.length) return null;
      const top = document.getElementById("flame").getBoundingClientRect().top + window.scrollY;
      window.scrollTo(0, top + rects[0].y - window.innerHeight / 2);
      return { x: rects[0].x, y: rects[0].y, w: rects[0].w, h: rects[0].h };
    }, options.click);
    if (!target) throw new Error(`no frame named ${options.click} is drawn`);
    const bounds = await (await page.$("#flame")).boundingBox();
    const x = bounds.x + target.x + target.w / 2;
    const y = bounds.y + target.y + target.h / 2;
    await page.mouse.move(x, y);
    result.tooltip = await page.$eval("#tooltip", (element) => ({
      hidden: element.hidden,
      text: element.textContent,
      name: element.dataset.name,
      share: Number(element.dataset.share),
      change: element.dataset.change === undefined ? null : Number(element.dataset.change),
    }));
    await page.mouse.click(x, y);
    result.zoomed = await page.$eval("#zoomed", (element) => ({
      text: element.textContent,
      name: element.dataset.name || null,
    }));
    result.zoomedWidth = await page.evaluate((name) => {
      const rects = window.openprofFlame.rects.filter((rect) => rect.name === name);
      const width = document.getElementById("flame").clientWidth;
      return Math.max(...rects.map((rect) => rect.w)) / width;
    }, options.click);
    await shot("flamegraph-zoom.png");
    await page.click("#reset");
    result.zoomedAfterReset = await page.textContent("#zoomed");
  }

  // Reversed: the frames right under the root are the leaves, widest first.
  await page.click("#reverse");
  result.reversedRoots = await page.evaluate(() => window.openprofFlame.top());
  result.reversedPressed = await page.getAttribute("#reverse", "aria-pressed");
  await shot("flamegraph-reversed.png");
  await page.click("#reverse");

  // The call tree, opened along the names asked for.
  await page.click("#tree-tab");
  for (const name of options.expand) {
    const toggle = page.locator(`#tree tbody tr[data-name="${name}"] .toggle[aria-expanded="false"]`).first();
    if (await toggle.count()) await toggle.click();
  }
  result.treeVisible = await page.isVisible("#tree");
  result.flameVisible = await page.isVisible("#flame");
  result.tree = await page.$$eval("#tree tbody tr", (rows) => rows.map((row) => ({
    name: row.dataset.name,
    total: Number(row.dataset.total),
    self: Number(row.dataset.self),
    depth: Number(row.dataset.depth),
    base: row.dataset.base === undefined ? null : Number(row.dataset.base),
    change: row.dataset.change === undefined ? null : Number(row.dataset.change),
    cells: [...row.cells].map((cell) => cell.textContent),
  })));
  await shot("flamegraph-tree.png");
  await page.click("#flame-tab");

  // Every event in turn: the total the page shows for it.
  result.eventTotals = {};
  for (const event of result.events) {
    await page.selectOption("#event", event);
    result.eventTotals[event] = await total();
  }
} finally {
  await browser.close();
}
console.log(JSON.stringify(result));
