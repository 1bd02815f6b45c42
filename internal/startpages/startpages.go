// Package startpages gives back the executable's pages that only start-up
// needed.
//
// meshdns carries every stock CoreDNS plugin (cloud SDKs, tracing, the
// Kubernetes API types, Envoy's protobufs…). Initialising those packages
// touches about 55 MiB of a 96 MB binary once; the kernel keeps the pages
// mapped, so they stay in the process's RSS although a resolver serving
// three zones never runs that code again. Release tells the kernel that
// the process no longer needs its read-only executable mappings
// (madvise MADV_DONTNEED): the pages stay in the page cache, and those
// still used are mapped again on their next access (a minor fault, no
// I/O). What remains resident afterwards is the code and read-only data the
// process actually uses.
//
// Invariant: only private mappings of the running executable that are not
// writable and hold no anonymous (copy-on-write) page are released. Those
// hold exactly the file's bytes (text, rodata), so dropping them loses
// nothing; writable mappings (data, heap, stacks) are never touched, nor is
// a read-only mapping with a page written before: a PIE's relocated RELRO
// segment (dropping it crashes the process: `make test` runs the package
// test as a PIE too), a debugger's breakpoint.
package startpages

// Env names the environment variable that turns Release off ("1").
const Env = "MESHDNS_KEEP_STARTUP_PAGES"
