"""The inline CSS and JavaScript of the report page (``results/index.html``): nothing is fetched at
view time, so the page works from a file, an archived CI artifact, or offline."""

CSS = """
:root { --fg: #1d232a; --muted: #5b6570; --line: #d7dde3; --head: #eef2f6; --good: #1a7f37; --bad: #c62828;
        --accent: #2f5d8a; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); margin: 0 auto;
       max-width: 1280px; padding: 18px 24px 60px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.meta, .legend, .note { color: var(--muted); font-size: 12.5px; }
nav a { margin-right: 14px; color: var(--accent); text-decoration: none; }
table { border-collapse: collapse; margin: 6px 0 10px; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 9px; text-align: left; vertical-align: top; }
th { background: var(--head); position: sticky; top: 0; }
table.sortable th { cursor: pointer; user-select: none; white-space: nowrap; }
table.sortable th[aria-sort="ascending"]::after { content: " ▲"; font-size: 10px; }
table.sortable th[aria-sort="descending"]::after { content: " ▼"; font-size: 10px; }
td.num, th.num { text-align: right; }
td.score { white-space: nowrap; }
.ci { display: block; color: var(--muted); font-size: 11px; }
.tied { color: #b8860b; }
.marks { color: var(--bad); }
.pos { color: var(--good); } .neg { color: var(--bad); }
/* Neutral: a paired-test delta within the noise (p >= 0.05), or a paper delta on another model. */
.ns, .differs { color: var(--muted); }
.tag { font-size: 10.5px; border: 1px solid var(--line); border-radius: 3px; padding: 0 3px; white-space: nowrap; }
ul.notrun { margin: 4px 0 12px; padding-left: 20px; color: var(--muted); font-size: 12.5px; }
ul.notrun code { color: var(--fg); }
details > summary { cursor: pointer; }
details pre { font-size: 11.5px; background: #f7f9fb; border: 1px solid var(--line); padding: 8px; max-width: 900px;
              overflow-x: auto; white-space: pre-wrap; }
figure { margin: 10px 0 20px; } figure img { max-width: 100%; border: 1px solid var(--line); }
figcaption { color: var(--muted); font-size: 12px; }
section { border-top: 2px solid var(--line); margin-top: 20px; }
"""

# Sort a table by the clicked column: numbers by value (cells carry data-sort), text otherwise;
# a second click reverses. Rows without a value sort last either way.
JS = """
(function () {
  function key(cell) {
    var raw = cell ? (cell.getAttribute("data-sort") || cell.textContent) : "";
    var num = parseFloat(raw);
    return isNaN(num) ? { num: null, text: raw.trim().toLowerCase() } : { num: num, text: "" };
  }
  function sortBy(table, index, th) {
    var body = table.tBodies[0];
    var descending = th.getAttribute("aria-sort") !== "descending";
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[index]), y = key(b.cells[index]);
      if (x.num === null && y.num === null) {
        return descending ? y.text.localeCompare(x.text) : x.text.localeCompare(y.text);
      }
      if (x.num === null) { return 1; }
      if (y.num === null) { return -1; }
      return descending ? y.num - x.num : x.num - y.num;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    Array.prototype.forEach.call(th.parentNode.cells, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", descending ? "descending" : "ascending");
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, index) {
      th.title = "click to sort";
      th.addEventListener("click", function () { sortBy(table, index, th); });
    });
  });
})();
"""
