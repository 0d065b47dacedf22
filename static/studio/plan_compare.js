/* Compare page: one timeline per plan or run, stacked, every chart on the same x scale (0 to the longest). */
(function () {
  "use strict";

  document.addEventListener("DOMContentLoaded", function () {
    const data = JSON.parse(document.getElementById("compare-data").textContent);
    const charts = {};
    data.items.forEach(function (item) {
      const canvas = document.getElementById("timeline-" + item.key);
      const chart = window.AdaptisTimeline.create(canvas, item).chart;
      chart.options.scales.x.min = 0;
      chart.options.scales.x.max = data.x_max;
      chart.options.scales.x.title.text = "time since the iteration's start (ms)";
      chart.update("none");
      charts[item.key] = chart;
    });
    window.adaptisCompareCharts = charts;
  });
})();
