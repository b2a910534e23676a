"""Reports: what bench, auto and the label audit show, in one way.

  report_text  how values read in results.md, report.html and log lines: numbers, durations (the one formatter),
               model and row names
  html_report  report.html: a run on one self-contained page (bench's and auto's), rendered from
               templates/report.html.j2; the label audit builds its page from the same blocks
  markdown     results.md: bench's and auto's (their tables, the out-of-scope section, the arms)
  templating   the Jinja2 environment and its building blocks
  plots        headless charts (matplotlib, Agg)
  browser      a headless Chromium, to check the page as a browser renders it
"""
