// The dashboard's activity chart, drawn from the JSON the page embeds (json_script).
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("activity-data").textContent);
  var canvas = document.getElementById("activity-chart");
  if (!canvas || typeof Chart === "undefined") {
    return; // the table below the chart holds the same numbers
  }
  new Chart(canvas, {
    type: "bar",
    data: {
      labels: data.days,
      datasets: [
        { label: "Messages", data: data.messages, backgroundColor: "#2563eb" },
        { label: "New sessions", data: data.sessions, backgroundColor: "#16a34a" },
      ],
    },
    options: {
      responsive: true,
      maintainAspectRatio: false,
      animation: false,
      scales: { y: { beginAtZero: true, ticks: { precision: 0 } } },
    },
  });
  canvas.dataset.ready = "true";
})();
