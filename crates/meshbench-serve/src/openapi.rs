//! The API's OpenAPI 3.1 description, served at `/api/openapi.json`. A test walks every path
//! in it against the running server, so the description cannot list an endpoint that does
//! not exist.

use axum::Json;
use serde_json::{json, Value};

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    })
}

fn ok(description: &str, schema: Value) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": schema}}})
}

fn path_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": description, "schema": {"type": "string"}})
}

fn query_param(name: &str, description: &str, kind: &str) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description, "schema": {"type": kind}})
}

pub fn describe() -> Value {
    let id = path_param(
        "id",
        "a run's (or verification's) directory name under the results directory",
    );
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "meshbench",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Run, watch, browse, compare and verify meshbench experiments. With --token, send `Authorization: Bearer <token>`. A request that changes something carries a JSON body, a bearer token, or the page's x-csrf-token header."
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {
                        "error": {"type": "string", "description": "the message the CLI gives for the same input"},
                        "field": {"type": "string", "description": "the request field it is about"}
                    }
                },
                "NewRun": {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {
                        "profile": {"type": "string", "description": "a built-in profile (GET /api/profiles); default quick"},
                        "spec": {"type": "string", "description": "an experiment spec (YAML), instead of a profile"},
                        "scale": {"enum": ["local", "original"]},
                        "scenarios": {"type": "array", "items": {"type": "string"}},
                        "placements": {"type": "array", "items": {"type": "string"}},
                        "duration": {"type": "string", "examples": ["2s"]},
                        "warmup": {"type": "string", "examples": ["500ms"]},
                        "backend": {"enum": ["netns", "loopback", "kubernetes"], "description": "kubernetes when serve was given a cluster (--kubeconfig)"},
                        "pin": {"type": "boolean"}
                    }
                },
                "Job": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "kind": {"enum": ["run", "verify"]},
                        "status": {"enum": ["queued", "running", "complete", "partial", "failed", "cancelled"]},
                        "done": {"type": "integer"},
                        "total": {"type": "integer"},
                        "eta_seconds": {"type": ["number", "null"]},
                        "current": {"type": ["string", "null"]},
                        "reason": {"type": ["string", "null"]},
                        "live": {"type": "array", "items": {"type": "object"}},
                        "log": {"type": "array", "items": {"type": "object"}}
                    }
                },
                "Table": {
                    "type": "object",
                    "properties": {
                        "title": {"type": "string"},
                        "note": {"type": "string", "description": "how the figures were made, shown under the title; empty when the title says enough"},
                        "headers": {"type": "array", "items": {"type": "string"}},
                        "rows": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}}
                    }
                }
            }
        },
        "security": [{"bearer": []}, {}],
        "paths": {
            "/api/openapi.json": {"get": {"summary": "this description", "responses": {"200": ok("OpenAPI 3.1", json!({"type": "object"}))}}},
            "/api/profiles": {"get": {"summary": "the built-in profiles", "responses": {"200": ok("profiles", json!({"type": "array"}))}}},
            "/api/profiles/{name}": {"get": {
                "summary": "a built-in profile and its spec (YAML), to edit",
                "parameters": [path_param("name", "a profile name")],
                "responses": {"200": ok("the profile", json!({"type": "object"})), "404": error_response("no such profile")}
            }},
            "/api/runs": {
                "get": {"summary": "every run in the results directory, and queued jobs", "responses": {"200": ok("runs", json!({"type": "array"}))}},
                "post": {
                    "summary": "queue a run (one runs at a time)",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/NewRun"}}}},
                    "responses": {
                        "201": ok("queued", json!({"type": "object", "properties": {"id": {"type": "string"}}})),
                        "400": error_response("invalid; `field` names the field"),
                        "429": error_response("the queue is full")
                    }
                }
            },
            "/api/runs/{id}": {
                "get": {"summary": "a run's status, progress and summary", "parameters": [id.clone()], "responses": {"200": ok("the run", json!({"type": "object"})), "404": error_response("no such run")}},
                "delete": {"summary": "cancel a run, as Ctrl-C: finished cells are kept, the run is partial", "parameters": [id.clone()], "responses": {"202": ok("stopping or dequeued", json!({"type": "object"})), "404": error_response("no such run"), "409": error_response("not running")}}
            },
            "/api/runs/{id}/events": {"get": {
                "summary": "server-sent events: snapshot, status (cells done, ETA), second (the running cell's rate, p50, p99), log (the lab's events), done",
                "parameters": [id.clone()],
                "responses": {"200": {"description": "an event stream", "content": {"text/event-stream": {}}}, "404": error_response("no such run")}
            }},
            "/api/runs/{id}/files": {"get": {"summary": "the files a run offers", "parameters": [id.clone()], "responses": {"200": ok("files", json!({"type": "array"}))}}},
            "/api/runs/{id}/files/{name}": {"get": {
                "summary": "a file: results.json, report.html, the CSVs, export/fortio/<cell>.json, export/smp/<cell>.json",
                "parameters": [id.clone(), path_param("name", "a name from the run's file list")],
                "responses": {"200": {"description": "the file"}, "404": error_response("not one of the run's files")}
            }},
            "/api/runs/{id}/cost": {"get": {
                "summary": "meshbench cost over a run",
                "parameters": [id.clone(), query_param("pods", "pods the mesh would serve", "integer"), query_param("cpu_price", "one core for a month", "number"), query_param("mem_price", "one GiB for a month", "number")],
                "responses": {"200": ok("the cost table", json!({"type": "object", "properties": {"table": {"$ref": "#/components/schemas/Table"}}})), "400": error_response("a bad price")}
            }},
            "/api/compare": {"get": {
                "summary": "meshbench compare: B against A, with significance",
                "parameters": [query_param("a", "the reference run", "string"), query_param("b", "the run compared with it", "string")],
                "responses": {"200": ok("the tables", json!({"type": "object", "properties": {"tables": {"type": "array", "items": {"$ref": "#/components/schemas/Table"}}}})), "400": error_response("a or b missing or unknown")}
            }},
            "/api/verify": {
                "get": {"summary": "verifications on disk and running", "responses": {"200": ok("verifications", json!({"type": "object"}))}},
                "post": {
                    "summary": "queue a verification (E3's matrix, wire evidence, identity checks)",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "properties": {"meshes": {"type": "array", "items": {"type": "string"}}}}}}},
                    "responses": {"201": ok("queued", json!({"type": "object"})), "400": error_response("an unknown mesh")}
                }
            },
            "/api/verify/{id}": {
                "get": {"summary": "a verification: its job and its report", "parameters": [id.clone()], "responses": {"200": ok("the verification", json!({"type": "object"})), "404": error_response("no such verification")}},
                "delete": {"summary": "cancel a verification", "parameters": [id.clone()], "responses": {"202": ok("stopping", json!({"type": "object"})), "404": error_response("no such job")}}
            },
            "/api/e3/experiment": {"post": {
                "summary": "E3's experimenter against the server's calculator",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "properties": {
                    "interactions": {"type": "integer", "default": 100},
                    "batchSize": {"type": "integer", "default": 10},
                    "intervalBetweenBatchesInMilliseconds": {"type": "integer", "default": 0},
                    "allowedOperations": {"type": "array", "items": {"enum": ["sum", "subtraction", "multiplication", "division"]}}
                }}}}},
                "responses": {"200": ok("E3's result: rttsInMilliseconds, failures, mean, median, standardDeviation, workload", json!({"type": "object"})), "400": error_response("a bad field"), "409": error_response("a run is measuring")}
            }},
            "/api/e3/analyze": {"post": {
                "summary": "E3's analyzer: RTT90/95/99 and the full statistics",
                "parameters": [query_param("discardFirst", "leave out the first RTT", "boolean"), query_param("format", "json (default) or csv", "string")],
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object"}}}},
                "responses": {"200": ok("the analysis", json!({"type": "object"})), "400": error_response("not an experiment result")}
            }}
        }
    })
}

pub async fn document() -> Json<Value> {
    Json(describe())
}
