"""What keeps a run safe: data set locks, scratch folders and clean-up after a killed run,
atomic publishing of outputs, crash points for the tests, the launch guard, the log's
handlers, and the hooks that apply them to every ``kedro run``. Imports nothing of the
package outside this folder."""
