(function () {
  "use strict";
  var form = document.getElementById("filters");
  if (!form) { return; }
  function apply() {
    var on = {};
    form.querySelectorAll("input[name=verdict]").forEach(function (box) {
      on[box.value] = box.checked;
    });
    var scenario = form.querySelector("select[name=scenario]").value;
    document.querySelectorAll("[data-verdict]").forEach(function (el) {
      var s = el.getAttribute("data-scenario");
      var shown = on[el.getAttribute("data-verdict")] && (!scenario || !s || s === scenario);
      el.classList.toggle("off", !shown);
    });
    document.querySelectorAll("tr[data-row-scenario]").forEach(function (row) {
      var s = row.getAttribute("data-row-scenario");
      row.classList.toggle("off-row", Boolean(scenario) && s !== scenario);
    });
  }
  form.addEventListener("change", apply);
  apply();
  document.documentElement.setAttribute("data-filters", "ready");
})();
