// Opens a profile in speedscope's own app (npm's `speedscope`, its release build, in headless
// Chromium), as `speedscope FILE` does, and prints what its Sandwich view shows, as JSON: a
// reader we did not write, for the CLI's tests of the speedscope and Chrome trace outputs.
//
// node speedscope.mjs PROFILE
//
// OPENPROF_BROWSER_DEPS: the directory whose node_modules holds playwright-core and speedscope
// (default: this script's own); CHROMIUM: the browser (default /usr/bin/chromium).
import { createRequire } from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";

const deps = path.resolve(process.env.OPENPROF_BROWSER_DEPS || path.dirname(new URL(import.meta.url).pathname));
const { chromium } = createRequire(path.join(deps, "package.json"))("playwright-core");
const app = path.join(deps, "node_modules", "speedscope", "dist", "release", "index.html");

const profile = process.argv[2];
if (!profile) throw new Error("usage: speedscope.mjs PROFILE");
// speedscope's command line hands a file to its page the same way: a script that calls
// speedscope.loadFileFromBase64, named in the page's #localProfilePath.
const loader = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "openprof-speedscope-")), "load.js");
fs.writeFileSync(loader, `speedscope.loadFileFromBase64(${JSON.stringify(path.basename(profile))}, ` +
  `${JSON.stringify(fs.readFileSync(profile).toString("base64"))})`);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  // Root in a container has no user namespaces for Chromium's sandbox.
  args: ["--allow-file-access-from-files",
    ...(process.getuid && process.getuid() === 0 ? ["--no-sandbox"] : [])],
});
const result = { errors: [] };
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.on("pageerror", (error) => result.errors.push(String(error)));
  page.on("console", (message) => {
    if (message.type() === "error") result.errors.push(message.text());
  });
  await page.goto(`${pathToFileURL(app).href}#localProfilePath=${loader}`);
  // The title names the file once speedscope has imported it.
  await page.waitForFunction(() => document.title.includes(" - speedscope"), null, { timeout: 20000 });
  result.title = await page.title();
  await page.getByText("Sandwich").click();
  await page.getByText("Symbol Name").first().waitFor({ timeout: 20000 });
  // A file of several profiles (threads, events) shows `(1/N)` in the toolbar; `n` shows the
  // next one. Every profile's Sandwich rows are taken, with the profile's toolbar title.
  const toolbar = async () => (await page.textContent("body")).match(/\((\d+)\/(\d+)\)/);
  const position = await toolbar();
  const count = position ? Number(position[2]) : 1;
  result.profiles = [];
  for (let index = 0; index < count; index++) {
    // The Sandwich table's rows of [total, self, name], after its header: `2.23s (73%)`, ...
    // (the profile selector's rows come before it).
    const rows = await page.$$eval("tr", (rows) => {
      const cells = rows.map((row) => Array.from(row.children).map((cell) => cell.textContent));
      const header = cells.findIndex((row) => row.join("|") === "Total|Self|Symbol Name");
      return header < 0 ? [] : cells.slice(header + 1).filter((row) => row.length === 3);
    });
    result.profiles.push(rows);
    if (index + 1 < count) {
      await page.keyboard.press("n");
      await page.waitForFunction((next) => document.body.textContent.includes(`(${next}/`),
        index + 2, { timeout: 20000 });
    }
  }
  result.rows = result.profiles.flat();
} finally {
  await browser.close();
  fs.rmSync(path.dirname(loader), { recursive: true, force: true });
}
console.log(JSON.stringify(result));
