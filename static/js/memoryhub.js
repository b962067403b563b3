// Behaviour every page shares. A file, not inline handlers: the Content-Security-Policy
// allows scripts from MemoryHub's own static files only.
(function () {
  "use strict";
  // <select data-submit-on-change> (the tenant switcher) submits its form when changed; the
  // form's own button does the same without JavaScript.
  document.addEventListener("change", function (event) {
    var field = event.target;
    if (field instanceof HTMLSelectElement && field.hasAttribute("data-submit-on-change")) {
      field.form.requestSubmit();
    }
  });
})();
