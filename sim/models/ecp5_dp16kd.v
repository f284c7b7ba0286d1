// ECP5 DP16KD block RAM (16 Kbit + parity, two ports): a simulation model of the modes onnx2hw's
// netlists use, from Lattice TN1264 (ECP5 and ECP5-5G Memory Usage Guide). Anything else is refused
// at time 0 (a parameter) or at the clock edge it happens (a pin: RST high, a write on the read
// port of a pseudo-dual-port block).
//
// Array: 1024 words of 18 bits (two 9-bit bytes per word: bits 8:0 and 17:9). INITVAL_nn holds
// words 16*nn .. 16*nn+15, word i of it in bits 20*i+17 .. 20*i (the top two bits of each 20-bit
// field are unused).
// Port widths (DATA_WIDTH_x) and the address bits that select data (TN1264 address table):
//   x18: AD[13:4] word; on a write AD[1:0] are the byte enables (AD0: bits 8:0, AD1: bits 17:9)
//   x9:  AD[13:3] byte (word AD[13:4], byte AD[3])
//   x4, x2, x1: AD[13:2], AD[13:1], AD[13:0]: the nibble, pair or bit within the 8 data bits of
//        the byte AD[13:3] (the ninth, parity, bit of a byte is not reached in these widths)
//   x36 (pseudo dual port: DATA_WIDTH_A = DATA_WIDTH_B = 36; port A writes DI = {DIB, DIA},
//        port B reads DO = {DOB, DOA}): AD[13:5] selects words 2a (DIA/DOA) and 2a+1 (DIB/DOB);
//        ADA[3:0] are the byte enables of DI's four 9-bit bytes
// Read timing (per port, its own clock): on a rising edge with CE high and CS = CSDECODE the read
// latch takes the addressed data, or on a write what WRITEMODE says (NORMAL: unchanged,
// WRITETHROUGH: the data written, READBEFOREWRITE: the data before the write). REGMODE NOREG:
// DO is the latch (data one edge after the address). REGMODE OUTREG: DO is the output register,
// which takes the latch at a rising edge with OCE high (data two edges after the address; OCE low
// holds it). In x36 the output register of both halves is port B's (REGMODE_A must equal
// REGMODE_B and OCEA must equal OCEB). Writes land after the edge: the other port reading the
// same word at the same edge gets the old data (TN1264 leaves that case undefined; onnx2hw's
// memories treat it as don't-care). Latches and registers start at 0 (GSR is not simulated).
module DP16KD(
  input  DIA17, DIA16, DIA15, DIA14, DIA13, DIA12, DIA11, DIA10, DIA9, DIA8, DIA7, DIA6, DIA5, DIA4, DIA3, DIA2, DIA1, DIA0,
  input  ADA13, ADA12, ADA11, ADA10, ADA9, ADA8, ADA7, ADA6, ADA5, ADA4, ADA3, ADA2, ADA1, ADA0,
  input  CEA, OCEA, CLKA, WEA, RSTA, CSA2, CSA1, CSA0,
  output DOA17, DOA16, DOA15, DOA14, DOA13, DOA12, DOA11, DOA10, DOA9, DOA8, DOA7, DOA6, DOA5, DOA4, DOA3, DOA2, DOA1, DOA0,
  input  DIB17, DIB16, DIB15, DIB14, DIB13, DIB12, DIB11, DIB10, DIB9, DIB8, DIB7, DIB6, DIB5, DIB4, DIB3, DIB2, DIB1, DIB0,
  input  ADB13, ADB12, ADB11, ADB10, ADB9, ADB8, ADB7, ADB6, ADB5, ADB4, ADB3, ADB2, ADB1, ADB0,
  input  CEB, OCEB, CLKB, WEB, RSTB, CSB2, CSB1, CSB0,
  output DOB17, DOB16, DOB15, DOB14, DOB13, DOB12, DOB11, DOB10, DOB9, DOB8, DOB7, DOB6, DOB5, DOB4, DOB3, DOB2, DOB1, DOB0
);
  parameter DATA_WIDTH_A = 18;
  parameter DATA_WIDTH_B = 18;
  parameter REGMODE_A = "NOREG";
  parameter REGMODE_B = "NOREG";
  parameter RESETMODE = "SYNC";
  parameter ASYNC_RESET_RELEASE = "SYNC";
  parameter CSDECODE_A = "0b000";
  parameter CSDECODE_B = "0b000";
  parameter WRITEMODE_A = "NORMAL";
  parameter WRITEMODE_B = "NORMAL";
  parameter CLKAMUX = "CLKA";
  parameter CLKBMUX = "CLKB";
  parameter GSR = "ENABLED";
  parameter INITVAL_00 = 320'h0;
  parameter INITVAL_01 = 320'h0;
  parameter INITVAL_02 = 320'h0;
  parameter INITVAL_03 = 320'h0;
  parameter INITVAL_04 = 320'h0;
  parameter INITVAL_05 = 320'h0;
  parameter INITVAL_06 = 320'h0;
  parameter INITVAL_07 = 320'h0;
  parameter INITVAL_08 = 320'h0;
  parameter INITVAL_09 = 320'h0;
  parameter INITVAL_0A = 320'h0;
  parameter INITVAL_0B = 320'h0;
  parameter INITVAL_0C = 320'h0;
  parameter INITVAL_0D = 320'h0;
  parameter INITVAL_0E = 320'h0;
  parameter INITVAL_0F = 320'h0;
  parameter INITVAL_10 = 320'h0;
  parameter INITVAL_11 = 320'h0;
  parameter INITVAL_12 = 320'h0;
  parameter INITVAL_13 = 320'h0;
  parameter INITVAL_14 = 320'h0;
  parameter INITVAL_15 = 320'h0;
  parameter INITVAL_16 = 320'h0;
  parameter INITVAL_17 = 320'h0;
  parameter INITVAL_18 = 320'h0;
  parameter INITVAL_19 = 320'h0;
  parameter INITVAL_1A = 320'h0;
  parameter INITVAL_1B = 320'h0;
  parameter INITVAL_1C = 320'h0;
  parameter INITVAL_1D = 320'h0;
  parameter INITVAL_1E = 320'h0;
  parameter INITVAL_1F = 320'h0;
  parameter INITVAL_20 = 320'h0;
  parameter INITVAL_21 = 320'h0;
  parameter INITVAL_22 = 320'h0;
  parameter INITVAL_23 = 320'h0;
  parameter INITVAL_24 = 320'h0;
  parameter INITVAL_25 = 320'h0;
  parameter INITVAL_26 = 320'h0;
  parameter INITVAL_27 = 320'h0;
  parameter INITVAL_28 = 320'h0;
  parameter INITVAL_29 = 320'h0;
  parameter INITVAL_2A = 320'h0;
  parameter INITVAL_2B = 320'h0;
  parameter INITVAL_2C = 320'h0;
  parameter INITVAL_2D = 320'h0;
  parameter INITVAL_2E = 320'h0;
  parameter INITVAL_2F = 320'h0;
  parameter INITVAL_30 = 320'h0;
  parameter INITVAL_31 = 320'h0;
  parameter INITVAL_32 = 320'h0;
  parameter INITVAL_33 = 320'h0;
  parameter INITVAL_34 = 320'h0;
  parameter INITVAL_35 = 320'h0;
  parameter INITVAL_36 = 320'h0;
  parameter INITVAL_37 = 320'h0;
  parameter INITVAL_38 = 320'h0;
  parameter INITVAL_39 = 320'h0;
  parameter INITVAL_3A = 320'h0;
  parameter INITVAL_3B = 320'h0;
  parameter INITVAL_3C = 320'h0;
  parameter INITVAL_3D = 320'h0;
  parameter INITVAL_3E = 320'h0;
  parameter INITVAL_3F = 320'h0;

  localparam [64*320-1:0] INIT = {INITVAL_3F, INITVAL_3E, INITVAL_3D, INITVAL_3C, INITVAL_3B, INITVAL_3A, INITVAL_39, INITVAL_38, INITVAL_37, INITVAL_36, INITVAL_35, INITVAL_34, INITVAL_33, INITVAL_32, INITVAL_31, INITVAL_30, INITVAL_2F, INITVAL_2E, INITVAL_2D, INITVAL_2C, INITVAL_2B, INITVAL_2A, INITVAL_29, INITVAL_28, INITVAL_27, INITVAL_26, INITVAL_25, INITVAL_24, INITVAL_23, INITVAL_22, INITVAL_21, INITVAL_20, INITVAL_1F, INITVAL_1E, INITVAL_1D, INITVAL_1C, INITVAL_1B, INITVAL_1A, INITVAL_19, INITVAL_18, INITVAL_17, INITVAL_16, INITVAL_15, INITVAL_14, INITVAL_13, INITVAL_12, INITVAL_11, INITVAL_10, INITVAL_0F, INITVAL_0E, INITVAL_0D, INITVAL_0C, INITVAL_0B, INITVAL_0A, INITVAL_09, INITVAL_08, INITVAL_07, INITVAL_06, INITVAL_05, INITVAL_04, INITVAL_03, INITVAL_02, INITVAL_01, INITVAL_00};
  localparam PDP = DATA_WIDTH_A == 36;

  function automatic ok_width(input integer w);
    ok_width = w == 1 || w == 2 || w == 4 || w == 9 || w == 18;
  endfunction
  function automatic ok_mode(input [8*6-1:0] m);
    ok_mode = m == "NOREG" || m == "OUTREG";
  endfunction
  function automatic ok_write(input [8*15-1:0] m);
    ok_write = m == "NORMAL" || m == "WRITETHROUGH" || m == "READBEFOREWRITE";
  endfunction

  initial begin
    if (!(PDP ? DATA_WIDTH_B == 36 : ok_width(DATA_WIDTH_A) && ok_width(DATA_WIDTH_B)))
      $fatal(1, "DP16KD model: DATA_WIDTH_A=%0d DATA_WIDTH_B=%0d not modelled (1, 2, 4, 9, 18 each, or 36 both)",
             DATA_WIDTH_A, DATA_WIDTH_B);
    if (!ok_mode(REGMODE_A) || !ok_mode(REGMODE_B) || (PDP && REGMODE_A != REGMODE_B))
      $fatal(1, "DP16KD model: REGMODE_A=%s REGMODE_B=%s not modelled", REGMODE_A, REGMODE_B);
    if (!ok_write(WRITEMODE_A) || !ok_write(WRITEMODE_B))
      $fatal(1, "DP16KD model: WRITEMODE_A=%s WRITEMODE_B=%s not modelled", WRITEMODE_A, WRITEMODE_B);
    if (CSDECODE_A != "0b000" || CSDECODE_B != "0b000")
      $fatal(1, "DP16KD model: CSDECODE_A=%s CSDECODE_B=%s not modelled (0b000 only)", CSDECODE_A, CSDECODE_B);
    if (CLKAMUX != "CLKA" || CLKBMUX != "CLKB")
      $fatal(1, "DP16KD model: CLKAMUX=%s CLKBMUX=%s not modelled (rising edges only)", CLKAMUX, CLKBMUX);
    if (GSR != "DISABLED")
      $fatal(1, "DP16KD model: GSR=%s not modelled (DISABLED only)", GSR);
    if ((RESETMODE != "SYNC" && RESETMODE != "ASYNC") || (ASYNC_RESET_RELEASE != "SYNC" && ASYNC_RESET_RELEASE != "ASYNC"))
      $fatal(1, "DP16KD model: RESETMODE=%s ASYNC_RESET_RELEASE=%s unknown", RESETMODE, ASYNC_RESET_RELEASE);
  end

  reg [17:0] mem [0:1023];
  integer k;
  initial for (k = 0; k < 1024; k = k + 1) mem[k] = INIT[320 * (k / 16) + 20 * (k % 16) +: 18];

  wire [17:0] dia = {DIA17, DIA16, DIA15, DIA14, DIA13, DIA12, DIA11, DIA10, DIA9, DIA8, DIA7, DIA6, DIA5, DIA4, DIA3, DIA2, DIA1, DIA0}, dib = {DIB17, DIB16, DIB15, DIB14, DIB13, DIB12, DIB11, DIB10, DIB9, DIB8, DIB7, DIB6, DIB5, DIB4, DIB3, DIB2, DIB1, DIB0};
  wire [13:0] ada = {ADA13, ADA12, ADA11, ADA10, ADA9, ADA8, ADA7, ADA6, ADA5, ADA4, ADA3, ADA2, ADA1, ADA0}, adb = {ADB13, ADB12, ADB11, ADB10, ADB9, ADB8, ADB7, ADB6, ADB5, ADB4, ADB3, ADB2, ADB1, ADB0};
  wire csa = {CSA2, CSA1, CSA0} == 3'b000, csb = {CSB2, CSB1, CSB0} == 3'b000;

  // bit offset of a narrow (x1 .. x9) datum in its word
  function automatic [4:0] offset(input [13:0] ad, input integer w);
    offset = (ad[3] ? 5'd9 : 5'd0) + (w >= 9 ? 5'd0 : {2'b0, ad[2:0] & ~(w - 1)});
  endfunction
  // the 18 bits of the word that a write of width w at ad changes
  function automatic [17:0] write_mask(input [13:0] ad, input integer w);
    if (w == 18) write_mask = {{9{ad[1]}}, {9{ad[0]}}};
    else write_mask = ((18'd1 << w) - 18'd1) << offset(ad, w);
  endfunction
  // a port's read data (x1 .. x18) on its 18 outputs, the bits above the width 0
  function automatic [17:0] read_data(input [17:0] word, input [13:0] ad, input integer w);
    read_data = w == 18 ? word : (word >> offset(ad, w)) & ((18'd1 << w) - 18'd1);
  endfunction
  function automatic [17:0] merge(input [17:0] word, input [17:0] data, input [13:0] ad, input integer w);
    reg [17:0] m;
    m = write_mask(ad, w);
    merge = (word & ~m) | ((w == 18 ? data : data << offset(ad, w)) & m);
  endfunction

  reg [17:0] latch_a = 18'd0, latch_b = 18'd0, oreg_a = 18'd0, oreg_b = 18'd0;
  // x36: the DOA half of port B's read
  reg [17:0] latch_p = 18'd0, oreg_p = 18'd0;

  // port A (in x36: the write port; its latch is not used)
  always @(posedge CLKA) begin
    if (RSTA) $fatal(1, "DP16KD model: RSTA high (resets are not modelled)");
    if (CEA && csa) begin
      if (PDP) begin
        if (WEA) begin
          mem[{ada[13:5], 1'b0}] <= (mem[{ada[13:5], 1'b0}] & ~{{9{ada[1]}}, {9{ada[0]}}}) | (dia & {{9{ada[1]}}, {9{ada[0]}}});
          mem[{ada[13:5], 1'b1}] <= (mem[{ada[13:5], 1'b1}] & ~{{9{ada[3]}}, {9{ada[2]}}}) | (dib & {{9{ada[3]}}, {9{ada[2]}}});
        end
      end else if (WEA) begin
        mem[ada[13:4]] <= merge(mem[ada[13:4]], dia, ada, DATA_WIDTH_A);
        if (WRITEMODE_A == "WRITETHROUGH")
          latch_a <= read_data(merge(mem[ada[13:4]], dia, ada, DATA_WIDTH_A), ada, DATA_WIDTH_A);
        else if (WRITEMODE_A == "READBEFOREWRITE")
          latch_a <= read_data(mem[ada[13:4]], ada, DATA_WIDTH_A);
      end else
        latch_a <= read_data(mem[ada[13:4]], ada, DATA_WIDTH_A);
    end
    if (OCEA && !PDP) oreg_a <= latch_a;
  end

  // port B (in x36: the read port of all 36 bits)
  always @(posedge CLKB) begin
    if (RSTB) $fatal(1, "DP16KD model: RSTB high (resets are not modelled)");
    if (PDP && REGMODE_B == "OUTREG" && OCEA != OCEB)
      $fatal(1, "DP16KD model: OCEA and OCEB differ in x36 with OUTREG (one output register)");
    if (CEB && csb) begin
      if (PDP) begin
        if (WEB) $fatal(1, "DP16KD model: WEB high in x36 (port B only reads)");
        latch_p <= mem[{adb[13:5], 1'b0}];
        latch_b <= mem[{adb[13:5], 1'b1}];
      end else if (WEB) begin
        mem[adb[13:4]] <= merge(mem[adb[13:4]], dib, adb, DATA_WIDTH_B);
        if (WRITEMODE_B == "WRITETHROUGH")
          latch_b <= read_data(merge(mem[adb[13:4]], dib, adb, DATA_WIDTH_B), adb, DATA_WIDTH_B);
        else if (WRITEMODE_B == "READBEFOREWRITE")
          latch_b <= read_data(mem[adb[13:4]], adb, DATA_WIDTH_B);
      end else
        latch_b <= read_data(mem[adb[13:4]], adb, DATA_WIDTH_B);
    end
    if (PDP && OCEB) oreg_p <= latch_p;
    if (OCEB) oreg_b <= latch_b;
  end

  assign {DOA17, DOA16, DOA15, DOA14, DOA13, DOA12, DOA11, DOA10, DOA9, DOA8, DOA7, DOA6, DOA5, DOA4, DOA3, DOA2, DOA1, DOA0} = PDP ? (REGMODE_B == "OUTREG" ? oreg_p : latch_p)
      : REGMODE_A == "OUTREG" ? oreg_a : latch_a;
  assign {DOB17, DOB16, DOB15, DOB14, DOB13, DOB12, DOB11, DOB10, DOB9, DOB8, DOB7, DOB6, DOB5, DOB4, DOB3, DOB2, DOB1, DOB0} = REGMODE_B == "OUTREG" ? oreg_b : latch_b;
endmodule
