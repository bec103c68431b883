// A click on a copyable field selects its text (no inline handlers: the
// Content-Security-Policy allows scripts from the viewer's own files only).
document.addEventListener("click", function (event) {
  var target = event.target;
  if (target instanceof HTMLInputElement && target.classList.contains("copy")) {
    target.select();
  }
});
