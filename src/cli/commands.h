/* One function per `kvrouter <command>`, each in its own cmd_<name>.c.
 * Each returns the process exit status: 0 ok, 1 runtime failure, 2 usage. */
#ifndef KVR_CLI_COMMANDS_H
#define KVR_CLI_COMMANDS_H

int kvr_cmd_hash(int argc, char **argv);
int kvr_cmd_decode(int argc, char **argv);
int kvr_cmd_serve(int argc, char **argv);
int kvr_cmd_tap(int argc, char **argv);
int kvr_cmd_bench(int argc, char **argv);
int kvr_cmd_sim(int argc, char **argv);

#endif
