// A click on a copyable field selects its text (no inline handlers: the
// Content-Security-Policy allows scripts from the viewer's own files only).
document.addEventListener("click", function (event) {
  var target = event.target;
  if (target instanceof HTMLInputElement && target.classList.contains("copy")) {
    target.select();
  }
});

// "unfold all" / "fold all" open or close every folded block of one list.
document.addEventListener("click", function (event) {
  var button = event.target;
  if (!(button instanceof HTMLButtonElement) || !button.classList.contains("fold")) {
    return;
  }
  var list = document.getElementById(button.dataset.target);
  if (!list) {
    return;
  }
  var open = button.dataset.fold === "open";
  list.querySelectorAll("details").forEach(function (details) {
    if (!details.classList.contains("json")) {
      details.open = open;
    }
  });
});
