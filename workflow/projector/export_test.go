package projector

// AuditPaged is Audit with a page size of its own, so tests reach the
// path that continues past a full first window page.
var AuditPaged = audit
