-- What a person's result for a tool must look like when they resolve one of its effects
-- as done: declared by the tool (result_schema=) or by the MCP proxy (the tool's output
-- schema), read by `oncelog resolve` in any process. One row per tool name.
CREATE TABLE result_contracts (
    tool       TEXT PRIMARY KEY,
    contract   TEXT NOT NULL,          -- JSON: {"form": "json" | "mcp", "schema": {...} | null}
    updated_at REAL NOT NULL
);
