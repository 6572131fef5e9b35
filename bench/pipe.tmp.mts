import Redis from "ioredis";
const r = new Redis({ lazyConnect: true });
for (let i = 0; i < Number(process.argv[2] ?? 15); i++) r.defineCommand(`sy_${i}`, { numberOfKeys: 1, lua: `return ${i}` });
for (let k = 0; k < 3; k++) {
  const t = process.cpuUsage();
  for (let i = 0; i < 1e5; i++) r.pipeline();
  const u = process.cpuUsage(t); console.log(process.argv[2], ((u.user + u.system) / 1e5).toFixed(2), "µs per pipeline");
}
r.disconnect();
