/** The daemon's Prometheus metrics, read by the benchmarks that run it (`--metrics 127.0.0.1:PORT`). */

/**
 * The value of metric `name` on the daemon listening at `port`: one series named with its labels
 * (`nfkeeper_repairs_total{cause="owners"}`), or the sum of every series of a bare name. Undefined
 * where there is none, or the daemon does not answer.
 */
export async function metricOf(port: number, name: string): Promise<number | undefined> {
  let text: string;
  try {
    text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  } catch {
    return undefined;
  }
  let sum: number | undefined;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const next = line[name.length];
    if (next !== ' ' && !(next === '{' && !name.includes('{'))) continue;
    sum = (sum ?? 0) + Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}
