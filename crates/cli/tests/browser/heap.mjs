// Drives openprof's HTML heap report in a real headless Chromium and prints what the page shows,
// as JSON, for the CLI's test suite to check against the dump's analysis: the suspects, the
// dominator tree's rows before and after expanding its largest node (and collapsing it), and
// the histogram's first rows as sorted by a click on a column.
//
// node heap.mjs PAGE.html [--screenshots DIR]
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
let screenshots = null;
while (args.length) {
  const flag = args.shift();
  const value = args.shift();
  if (flag === "--screenshots" && value !== undefined) screenshots = value;
  else throw new Error(`unknown option ${flag}`);
}
if (!pagePath) throw new Error("usage: heap.mjs PAGE.html [--screenshots DIR]");

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
    if (screenshots) await page.screenshot({ path: path.join(screenshots, name), fullPage: false });
  };
  await page.goto(pathToFileURL(path.resolve(pagePath)).href);
  result.suspects = await page.$$eval("#suspects .suspect", (boxes) => boxes.map((box) => box.innerText));
  await shot("heap-suspects.png");

  const treeRows = () => page.$$eval("#tree tbody tr", (rows) => rows.map((row) =>
    Array.from(row.cells).map((cell) => cell.innerText.trim())));
  await page.click('button[data-view="dominators"]');
  result.treeBefore = await treeRows();
  await page.click("#tree tbody tr:first-child .toggle");
  result.treeExpanded = await treeRows();
  // Expand the first child too, then collapse the top: every row under it goes.
  await page.click("#tree tbody tr:nth-child(2) .toggle");
  result.treeTwoLevels = await treeRows();
  await shot("heap-dominators.png");
  await page.click("#tree tbody tr:first-child .toggle");
  result.treeCollapsed = await treeRows();

  await page.click('button[data-view="histogram"]');
  const classRows = () => page.$$eval("#classes tbody tr", (rows) => rows.slice(0, 5).map((row) =>
    Array.from(row.cells).map((cell) => cell.innerText.trim())));
  result.histogramFirst = await classRows();
  await page.click('#classes th[data-key="objects"]');
  result.histogramByObjects = await classRows();
  await page.click('#classes th[data-key="objects"]');
  result.histogramByObjectsAscending = await classRows();
  await shot("heap-histogram.png");
} finally {
  await browser.close();
}
console.log(JSON.stringify(result));
