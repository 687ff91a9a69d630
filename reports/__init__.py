

# The one import name is `llmdiag`: reached as a top-level `reports` (a checkout's folder on sys.path), the same files
# would load a second time under other module names, with their own classes and caches.
if __name__ != "llmdiag.reports":
    raise ImportError("import llmdiag.reports, not reports: llmdiag's only import name is `llmdiag`")
