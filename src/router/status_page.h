#pragma once
// The router's status page, served at GET /: one self-contained HTML
// document (styles, script and plots inline; no external asset, so it works
// offline; its Content-Security-Policy lets the browser load nothing else). Its script
// reads the admin JSON endpoints every 2 s with the admin key the operator
// gives in the address's fragment (`/#key=KEY`, never sent to the server) or
// in the page's field, and shows the instances (health, version, load, KV),
// throughput and TTFT/TPOT over the last ten minutes, and the canary
// release's stage, comparison and decisions. Every figure it shows is taken
// as the JSON has it (data-key names which), for the page's own test.

namespace ds {

const char* status_page_html();
// The Content-Security-Policy the page is served with: inline script and
// style, requests to the router itself, nothing from anywhere else.
const char* status_page_policy();

}  // namespace ds
