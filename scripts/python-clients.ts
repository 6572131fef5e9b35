// The Python clients people point at an OpenAI-compatible endpoint — the
// official `openai` SDK, LangChain's `langchain-openai` and LiteLLM — pinned
// in a venv outside the repo (~/.cache/switchyard/python-clients-venv) for
// test/e2e/python-clients.test.ts, installed on first use by scripts/pyvenv.ts.
import path from "node:path";
import { fileURLToPath } from "node:url";
import { ensurePyVenv } from "./pyvenv.ts";

export const PYTHON_CLIENTS = ["openai==3.57.0", "langchain-openai==1.7.4", "langchain-core==1.8.3", "litellm==1.110.2"];
const constraints = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "test", "e2e", "python-clients", "constraints.txt");

/** The venv's python, installing the pinned clients first if they are not there; throws saying why when it cannot. */
export async function ensurePythonClients(log: (s: string) => void = () => {}): Promise<string> {
  const venv = await ensurePyVenv({ name: "python-clients", requirements: PYTHON_CLIENTS, constraints, dir: process.env.SWITCHYARD_PYTHON_CLIENTS_VENV, pythonVar: "SWITCHYARD_PYTHON" }, log);
  return venv.python;
}
