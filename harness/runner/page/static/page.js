// Sort a table by the clicked column: numbers by value (cells carry data-sort), text otherwise;
// a second click reverses. Rows without a value sort last either way.
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
