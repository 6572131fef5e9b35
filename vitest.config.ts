import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts", "apps/**/*.test.ts", "packages/**/*.test.ts", "workers/agent/**/*.test.ts", "db/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 120_000,
    // Integration tests share two CPU cores with real servers and a real
    // engine (which keeps both cores busy): one file at a time keeps their
    // latency assertions about the router, not about the neighbours.
    fileParallelism: false,
    pool: "forks",
  },
});
