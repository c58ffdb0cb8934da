// Times the web UI's interactions in headless Chromium for bench/ui.py: login, the agent's flame
// graph drawn, a click to zoom, a search, the switch to the call tree and to the hot methods.
//
// node bench/ui_timing.mjs URL AGENT   (credential in OPENPROF_UI_TOKEN; playwright-core from
// OPENPROF_BROWSER_DEPS's node_modules, Chromium from CHROMIUM or /usr/bin/chromium)
import { createRequire } from "node:module";
import path from "node:path";

const deps = process.env.OPENPROF_BROWSER_DEPS;
const { chromium } = createRequire(path.join(path.resolve(deps), "package.json"))("playwright-core");
const [base, agent] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: process.getuid && process.getuid() === 0 ? ["--no-sandbox"] : [],
});
const timings = {};
const time = async (name, action) => {
  const started = performance.now();
  await action();
  timings[name] = Math.round(performance.now() - started);
};
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
  page.on("dialog", (dialog) => dialog.accept());
  await page.goto(base + "/login");
  await page.fill("#token", process.env.OPENPROF_UI_TOKEN);
  await time("login", () => Promise.all([page.waitForURL(base + "/"), page.click("#submit")]));
  await time("fleet", () => page.waitForSelector("#fleet tbody tr"));
  let frame;
  let asked;
  await time("flame graph (first render)", async () => {
    asked = await page.evaluate(() => performance.timeOrigin + performance.now());
    await page.goto(base + "/#/agent/" + agent + "/flame");
    frame = await (await page.waitForSelector("#flame-frame")).contentFrame();
    await frame.waitForFunction(() => window.openprofFlame && window.openprofFlame.rects.length > 0, null, { timeout: 120000 });
  });
  // The frame's page timed by itself: from its navigation's start to the browser frame that
  // shows its first drawing.
  await frame.waitForFunction(() => window.openprofFlame.firstFrameMs !== null);
  timings["flame page's own first frame"] = Math.round(await frame.evaluate(() => window.openprofFlame.firstFrameMs));
  // How long the UI took to ask for the flame graph's page after the route changed, and to
  // show its first drawing, by the pages' own clocks (the driver's polling left out).
  const frameOrigin = await frame.evaluate(() => performance.timeOrigin);
  timings["the page asked for after"] = Math.round(frameOrigin - asked);
  timings["flame graph (first render), in-page clocks"] = Math.round(frameOrigin + timings["flame page's own first frame"] - asked);
  const target = await frame.evaluate(() => {
    const rects = window.openprofFlame.rects.filter((rect) => rect.w > 30 && rect.frame >= 0);
    rects.sort((a, b) => b.y - a.y || b.w - a.w);
    const rect = rects[Math.min(3, rects.length - 1)];
    return { x: rect.x + rect.w / 2, y: rect.y + rect.h / 2 };
  });
  const box = await (await frame.$("#flame")).boundingBox();
  await time("zoom (click a frame)", async () => {
    await page.mouse.click(box.x + target.x, box.y + target.y);
    await frame.waitForFunction(() => window.openprofFlame.zoom !== null);
  });
  await time("search", async () => {
    await frame.fill("#search", "Class1[0-9]\\.");
    await frame.waitForFunction(() => document.getElementById("matched").textContent.length > 0);
  });
  await time("call tree", async () => {
    await frame.click("#tree-tab");
    await frame.waitForSelector("#tree tbody tr");
  });
  await time("hot methods (switch statistic)", async () => {
    await page.click("#tab-methods");
    await page.waitForSelector("#methods tbody tr");
  });
  await time("back to the flame graph (its pane kept)", async () => {
    await page.click("#tab-flame");
    await page.waitForSelector("#flame-frame", { state: "visible" });
    frame = await (await page.$("#flame-frame")).contentFrame();
    await frame.waitForFunction(() => window.openprofFlame && window.openprofFlame.rects.length > 0, null, { timeout: 120000 });
  });
  // Kept, not loaded again: the zoom and the search are as they were left.
  timings["kept zoom and search"] = await frame.evaluate(() => window.openprofFlame.zoom !== null && document.getElementById("search").value !== "");
} finally {
  await browser.close();
}
console.log(JSON.stringify(timings));
