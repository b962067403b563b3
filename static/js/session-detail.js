// Start the transcript at its newest message, unless the link points at one.
(function () {
  "use strict";
  var box = document.getElementById("transcript-scroll");
  if (box && !window.location.hash) {
    box.scrollTop = box.scrollHeight;
  }
})();
