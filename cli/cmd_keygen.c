/* tether keygen --out DIR: write a provisioning key pair.
 *
 * DIR/provisioning.key (0600, the Ed25519 seed) and DIR/provisioning.pub
 * (the public key), in the format of docs/protocol.md. Never overwrites. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "common/log.h"
#include "proto/keys.h"

static void usage(FILE *out)
{
	fprintf(out, "usage: tether keygen --out DIR\n\n"
		     "Write a provisioning key pair: DIR/provisioning.key (secret, mode 0600)\n"
		     "and DIR/provisioning.pub (pin it on the net side). DIR is created if\n"
		     "missing; existing key files are never overwritten. Prints the key id.\n");
}

int cmd_keygen(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "out", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *dir = NULL;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'o':
			dir = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!dir || optind != argc) {
		usage(stderr);
		return 2;
	}
	uint8_t id[PROTO_KEY_ID_LEN];
	int r = provkey_write_files(dir, id);
	if (r == -EEXIST) {
		log_error("%s already holds provisioning.key or provisioning.pub: refusing to overwrite", dir);
		return 1;
	}
	if (r < 0) {
		log_error("cannot write a key pair into %s: %s", dir, strerror(-r));
		return 1;
	}
	char hex[PROTO_KEY_ID_HEX];
	key_id_hex(id, hex);
	printf("%s/provisioning.key\n%s/provisioning.pub\nkey id %s\n", dir, dir, hex);
	return 0;
}
