"""`turbospec audit`: benchmark OpenAI-compatible endpoints and write the inference-audit report.

Pipeline: workload (prompts) -> runner + client (load, streaming) -> stats / promscrape / roofline /
projection / cost / verdict (results.py assembles results.json) -> report (+ report_md, report_html,
plots). Usage, metric definitions, the results.json schema and the verdict rule: docs/audit.md.
"""
