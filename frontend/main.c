/* torchserve-c: the model server frontend. All the work is in cli.c and server.c. */
#include "cli.h"

int main(int argc, char **argv)
{
    return cli_main(argc, argv);
}
