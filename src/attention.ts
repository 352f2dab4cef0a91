// The status-bar item's colour and tooltip, from what each of its parts (the GPUs, the sync, the
// time left) says and how urgent it is.
import { IWord } from './vocabulary';

const RANK: { [level: string]: number } = { none: 0, ok: 0, pending: 0, warning: 1, error: 2 };

/** A part of the status-bar item: its words, their explanation and how urgent it is. */
export interface IStatusPart extends IWord {
  name: string;
}

/** The status-bar item's colour and tooltip. It is coloured only while a part needs the user
 * (warning: orange, error: red): an alert, a sync fault, a store on this machine's own disk,
 * another runtime writing, 10 minutes or less left. The tooltip says first why it is coloured,
 * every reason, then what each part says in full. */
export function attention(parts: IStatusPart[]): {
  level: 'calm' | 'warning' | 'error';
  title: string;
} {
  const urgent = parts.filter(p => RANK[p.level] > 0);
  const level = urgent.some(p => p.level === 'error')
    ? 'error'
    : urgent.length
      ? 'warning'
      : 'calm';
  const details = parts.filter(p => p.title).map(p => `${p.name}: ${p.title}`);
  if (level === 'calm') {
    return { level, title: details.join('\n') };
  }
  const colour = level === 'error' ? 'Red' : 'Orange';
  const reasons = urgent.map(p => `• ${p.name}: ${p.title || p.text}`);
  const others = parts
    .filter(p => RANK[p.level] === 0 && p.title)
    .map(p => `${p.name}: ${p.title}`);
  return {
    level,
    title: [`${colour} because:`, ...reasons, ...(others.length ? ['', ...others] : [])].join('\n')
  };
}
