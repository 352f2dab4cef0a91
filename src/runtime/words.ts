// The time left in the user's words: what the status bar and the panel's header say, and its tone.
import { deadlineSource, IWord, Level, timeLeft, WORDS } from '../vocabulary';
import { RuntimeModel } from './model';

/** The few words the status bar and the panel's header say about the time left: "24 min left",
 * amber from 10 minutes, red from 2. */
export function runtimeWord(model: RuntimeModel): IWord {
  if (model.released) {
    return {
      text: WORDS.runtime.released,
      title: 'This runtime was released: the server has stopped',
      level: 'none'
    };
  }
  const state = model.state;
  const left = model.remaining();
  if (!state || left === null) {
    return { text: '', title: '', level: 'none' };
  }
  const level: Level = left <= 120 ? 'error' : left <= 600 ? 'warning' : 'ok';
  const ends = new Date((state.deadline ?? 0) * 1000).toLocaleTimeString(undefined, {
    hour: '2-digit',
    minute: '2-digit'
  });
  return {
    text: timeLeft(left),
    title: `The runtime ends at ${ends} (${deadlineSource(state.source)})`,
    level
  };
}
