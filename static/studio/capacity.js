/*
 * Job page of a capacity job: days to train (x) against GPU-hours (y), one point per GPU count that has a
 * configuration, both axes logarithmic, each point labelled with its count; from the page's "capacity-data"
 * (planning.capacity.capacity_chart).
 */
(function () {
  "use strict";

  const countLabels = {
    id: "countLabels",
    afterDatasetsDraw: function (chart) {
      const context = chart.ctx;
      const meta = chart.getDatasetMeta(0);
      context.save();
      context.font = "12px sans-serif";
      context.fillStyle = "#374151";
      meta.data.forEach(function (element, index) {
        const point = chart.data.datasets[0].data[index];
        context.fillText(point.gpus.toLocaleString() + " GPUs", element.x + 7, element.y - 7);
      });
      context.restore();
    },
  };

  document.addEventListener("DOMContentLoaded", function () {
    const source = document.getElementById("capacity-data");
    if (!source) return;
    const data = JSON.parse(source.textContent);
    const points = data.points.map(function (point) {
      return {x: point.days, y: point.gpu_hours, gpus: point.gpus, short: point.short};
    });
    const compact = new Intl.NumberFormat("en", {notation: "compact", maximumSignificantDigits: 3});
    // a log axis around the points with room on both sides (equal GPU-hours at every count are a flat line)
    function axis(values, title) {
      return {type: "logarithmic", min: Math.min.apply(null, values) / 1.5, max: Math.max.apply(null, values) * 1.5,
              title: {display: true, text: title},
              ticks: {callback: function (value) { return compact.format(value); }}};
    }
    window.adaptisCapacity = new Chart(document.getElementById("capacity-chart"), {
      type: "scatter",
      data: {datasets: [{label: "best configuration per GPU count", data: points, showLine: true,
                         borderColor: "#2563eb", backgroundColor: "#2563eb", pointRadius: 5}]},
      options: {
        animation: false,
        layout: {padding: {right: 70, top: 16}},
        scales: {
          x: axis(points.map(function (point) { return point.x; }), "days to train"),
          y: axis(points.map(function (point) { return point.y; }), "GPU-hours"),
        },
        plugins: {
          legend: {display: false},
          tooltip: {callbacks: {label: function (item) {
            const point = item.raw;
            return point.gpus.toLocaleString() + " GPUs (" + point.short + "): " + point.x.toFixed(1) + " days, " +
              Math.round(point.y).toLocaleString() + " GPU-hours";
          }}},
        },
      },
      plugins: [countLabels],
    });
  });
})();
