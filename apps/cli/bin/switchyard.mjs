#!/usr/bin/env node
// `switchyard` entry point: runs the TypeScript sources through tsx's loader.
import { register } from "tsx/esm/api";

register();
const { main } = await import("../src/main.ts");
const code = await main(process.argv.slice(2));
// Long-running commands return only after an orderly shutdown; don't let a
// stray timer or socket keep the process alive past that.
process.exit(code);
