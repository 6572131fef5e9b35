import { defineConfig } from "drizzle-kit";

// drizzle-kit only diffs schema files into SQL here; it never connects.
export default defineConfig({
  dialect: "postgresql",
  schema: "./db/schema/index.ts",
  out: "./migrations",
});
