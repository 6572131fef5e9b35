// Schemathesis (PyPI), the OpenAPI fuzzer the API test runs against a live
// router: a pinned version in a venv outside the repo
// (~/.cache/switchyard/schemathesis-venv), installed on first use by
// scripts/pyvenv.ts. scripts/prepare.ts calls it before the tests, so a test
// never spends its time installing.
import { ensurePyVenv } from "./pyvenv.ts";

export const SCHEMATHESIS_VERSION = "4.32.5";

/** The venv's `st` entry point, installing the pinned Schemathesis first if it is not there; throws saying why when it cannot. */
export async function ensureSchemathesis(log: (s: string) => void = () => {}): Promise<string> {
  const venv = await ensurePyVenv(
    { name: "schemathesis", requirements: [`schemathesis==${SCHEMATHESIS_VERSION}`], dir: process.env.SWITCHYARD_SCHEMATHESIS_VENV, pythonVar: "SCHEMATHESIS_PYTHON", entry: "st" },
    log,
  );
  return venv.bin("st");
}
