// Search in the page, from search/search_index.js (docs/_hooks/offline.py): works opened from disk.
(function () {
  var docs = {};
  var index = lunr(function () {
    this.ref("location");
    this.field("title", {boost: 10});
    this.field("text");
    maskbenchSearchIndex.docs.forEach(function (doc) { docs[doc.location] = doc; this.add(doc); }, this);
  });

  function escapeHtml(value) {
    return value.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function search(query) {
    var words = query.trim().split(/\s+/).filter(function (w) { return w; });
    if (!words.length) return [];
    return index.query(function (q) {  // every word, as typed or as a prefix
      words.forEach(function (w) {
        var term = w.toLowerCase();
        q.term(term, {presence: lunr.Query.presence.REQUIRED, wildcard: lunr.Query.wildcard.TRAILING});
      });
    });
  }

  function show(query) {
    var results = document.getElementById("mkdocs-search-results");
    if (!results) return;
    results.innerHTML = "";
    var found = query.length > 1 ? search(query) : [];
    found.forEach(function (hit) {
      var doc = docs[hit.ref];
      results.insertAdjacentHTML("beforeend", '<article><h3><a href="' + base_url + "/" + escapeHtml(doc.location) +
        '">' + escapeHtml(doc.title) + "</a></h3><p>" + escapeHtml(doc.text.substring(0, 200)) + "</p></article>");
    });
    if (!found.length && query.length > 1) results.insertAdjacentHTML("beforeend", "<p>No results found</p>");
  }

  // the search box comes after the scripts in the page
  document.addEventListener("DOMContentLoaded", function () {
    var input = document.getElementById("mkdocs-search-query");
    if (!input) return;
    input.addEventListener("keyup", function () { show(input.value); });
    var asked = new URLSearchParams(window.location.search).get("q");
    if (asked) { input.value = asked; show(asked); }
  });
})();
