// How figures read in the panel and the status bar: the vocabulary's rules (src/vocabulary.ts),
// under the names the sections use.
import { clock, duration, percentText, size, span } from './vocabulary';

export function formatBytes(bytes: number | null | undefined): string {
  return size(bytes);
}

export function percent(used: number | null, total: number | null): number | null {
  if (used === null || total === null || total <= 0) {
    return null;
  }
  return (100 * used) / total;
}

export function formatPercent(value: number | null): string {
  return percentText(value);
}

/** The file name of a notebook path, which is what users recognise. */
export function shortPath(path: string): string {
  const parts = path.split('/');
  return parts[parts.length - 1] || path;
}

/** "45 s", "3 min": how long a chart reaches back. */
export function formatSpan(seconds: number): string {
  return span(seconds);
}

/** A countdown: "11:42:05", "9:05", "0:42". */
export function formatClock(seconds: number): string {
  return clock(seconds);
}

/** A duration in words: "2 h 5 min", "12 min", "40 s". */
export function formatDuration(seconds: number): string {
  return duration(seconds);
}
