/*
 * `kvbench dma`: H2D/D2H bandwidth of the libkv DMA paths.  kvbench's
 * main hands over argv with argv[0] = "dma"; the return value is the
 * program's exit status.
 */
#ifndef KVBENCH_DMA_H
#define KVBENCH_DMA_H

int kvbench_dma_main(int argc, char **argv);

#endif
