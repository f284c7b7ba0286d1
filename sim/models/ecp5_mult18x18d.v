// ECP5 MULT18X18D (18x18 multiplier of the sysDSP slice): a simulation model of the modes
// onnx2hw's netlists use, from Lattice TN1267 (ECP5 and ECP5-5G sysDSP Usage Guide). Anything else
// is refused at time 0 (a parameter) or at the clock edge it happens (SOURCEA/SOURCEB high).
//
// P[35:0] = A[17:0] * B[17:0], each operand signed (two's complement) when its SIGNEDx pin is
// high, else unsigned. Registers on the path, each present when its REG_*_CLK is CLK0 and absent
// (a wire) when NONE: the input registers of A (with SIGNEDA) and of B (with SIGNEDB), the pipeline
// register after the multiplier and the output register. A present register takes its input at a
// rising edge of CLK0 with CE0 high, and is cleared at a rising edge with RST0 high (RESETMODE
// SYNC; reset wins over the enable). The product of inputs applied before edge n therefore appears
// on P after edge n + (number of present registers) - 1; with none it is combinational.
// ROA/ROB carry the A/B input registers' contents (the operands when absent). The cascade, shift
// and pre-adder paths (C, SRIA/SRIB, SROA/SROB, ROC, SIGNEDP) are not modelled (outputs 0).
// Registers start at 0 (GSR is not simulated).
module MULT18X18D(
  input  A17, A16, A15, A14, A13, A12, A11, A10, A9, A8, A7, A6, A5, A4, A3, A2, A1, A0,
  input  B17, B16, B15, B14, B13, B12, B11, B10, B9, B8, B7, B6, B5, B4, B3, B2, B1, B0,
  input  C17, C16, C15, C14, C13, C12, C11, C10, C9, C8, C7, C6, C5, C4, C3, C2, C1, C0,
  input  SIGNEDA, SIGNEDB, SOURCEA, SOURCEB,
  input  CLK3, CLK2, CLK1, CLK0, CE3, CE2, CE1, CE0, RST3, RST2, RST1, RST0,
  input  SRIA17, SRIA16, SRIA15, SRIA14, SRIA13, SRIA12, SRIA11, SRIA10, SRIA9, SRIA8, SRIA7, SRIA6, SRIA5, SRIA4, SRIA3, SRIA2, SRIA1, SRIA0,
  input  SRIB17, SRIB16, SRIB15, SRIB14, SRIB13, SRIB12, SRIB11, SRIB10, SRIB9, SRIB8, SRIB7, SRIB6, SRIB5, SRIB4, SRIB3, SRIB2, SRIB1, SRIB0,
  output SROA17, SROA16, SROA15, SROA14, SROA13, SROA12, SROA11, SROA10, SROA9, SROA8, SROA7, SROA6, SROA5, SROA4, SROA3, SROA2, SROA1, SROA0,
  output SROB17, SROB16, SROB15, SROB14, SROB13, SROB12, SROB11, SROB10, SROB9, SROB8, SROB7, SROB6, SROB5, SROB4, SROB3, SROB2, SROB1, SROB0,
  output ROA17, ROA16, ROA15, ROA14, ROA13, ROA12, ROA11, ROA10, ROA9, ROA8, ROA7, ROA6, ROA5, ROA4, ROA3, ROA2, ROA1, ROA0,
  output ROB17, ROB16, ROB15, ROB14, ROB13, ROB12, ROB11, ROB10, ROB9, ROB8, ROB7, ROB6, ROB5, ROB4, ROB3, ROB2, ROB1, ROB0,
  output ROC17, ROC16, ROC15, ROC14, ROC13, ROC12, ROC11, ROC10, ROC9, ROC8, ROC7, ROC6, ROC5, ROC4, ROC3, ROC2, ROC1, ROC0,
  output P35, P34, P33, P32, P31, P30, P29, P28, P27, P26, P25, P24, P23, P22, P21, P20, P19, P18, P17, P16, P15, P14, P13, P12, P11, P10, P9, P8, P7, P6, P5, P4, P3, P2, P1, P0,
  output SIGNEDP
);
  parameter REG_INPUTA_CLK = "NONE";
  parameter REG_INPUTA_CE = "CE0";
  parameter REG_INPUTA_RST = "RST0";
  parameter REG_INPUTB_CLK = "NONE";
  parameter REG_INPUTB_CE = "CE0";
  parameter REG_INPUTB_RST = "RST0";
  parameter REG_INPUTC_CLK = "NONE";
  parameter REG_INPUTC_CE = "CE0";
  parameter REG_INPUTC_RST = "RST0";
  parameter REG_PIPELINE_CLK = "NONE";
  parameter REG_PIPELINE_CE = "CE0";
  parameter REG_PIPELINE_RST = "RST0";
  parameter REG_OUTPUT_CLK = "NONE";
  parameter REG_OUTPUT_CE = "CE0";
  parameter REG_OUTPUT_RST = "RST0";
  parameter CLK0_DIV = "ENABLED";
  parameter CLK1_DIV = "ENABLED";
  parameter CLK2_DIV = "ENABLED";
  parameter CLK3_DIV = "ENABLED";
  parameter HIGHSPEED_CLK = "NONE";
  parameter GSR = "ENABLED";
  parameter CAS_MATCH_REG = "FALSE";
  parameter SOURCEB_MODE = "B_SHIFT";
  parameter MULT_BYPASS = "DISABLED";
  parameter RESETMODE = "SYNC";

  function automatic ok_clock(input [8*4-1:0] c);
    ok_clock = c == "NONE" || c == "CLK0";
  endfunction

  initial begin
    if (!ok_clock(REG_INPUTA_CLK) || !ok_clock(REG_INPUTB_CLK) || !ok_clock(REG_PIPELINE_CLK)
        || !ok_clock(REG_OUTPUT_CLK) || REG_INPUTC_CLK != "NONE")
      $fatal(1, "MULT18X18D model: registers clocked by %s/%s/%s/%s (C: %s) not modelled (NONE or CLK0; C: NONE)",
             REG_INPUTA_CLK, REG_INPUTB_CLK, REG_PIPELINE_CLK, REG_OUTPUT_CLK, REG_INPUTC_CLK);
    if (REG_INPUTA_CE != "CE0" || REG_INPUTB_CE != "CE0" || REG_PIPELINE_CE != "CE0" || REG_OUTPUT_CE != "CE0"
        || REG_INPUTA_RST != "RST0" || REG_INPUTB_RST != "RST0" || REG_PIPELINE_RST != "RST0" || REG_OUTPUT_RST != "RST0")
      $fatal(1, "MULT18X18D model: clock enables or resets other than CE0/RST0 not modelled");
    if (RESETMODE != "SYNC" || GSR != "DISABLED" || CAS_MATCH_REG != "FALSE" || MULT_BYPASS != "DISABLED"
        || HIGHSPEED_CLK != "NONE" || CLK0_DIV != "ENABLED" || SOURCEB_MODE != "B_SHIFT")
      $fatal(1, "MULT18X18D model: RESETMODE=%s GSR=%s CAS_MATCH_REG=%s MULT_BYPASS=%s HIGHSPEED_CLK=%s not modelled",
             RESETMODE, GSR, CAS_MATCH_REG, MULT_BYPASS, HIGHSPEED_CLK);
  end

  localparam RA = REG_INPUTA_CLK == "CLK0", RB = REG_INPUTB_CLK == "CLK0";
  localparam RP = REG_PIPELINE_CLK == "CLK0", RO = REG_OUTPUT_CLK == "CLK0";

  wire [17:0] a = {A17, A16, A15, A14, A13, A12, A11, A10, A9, A8, A7, A6, A5, A4, A3, A2, A1, A0}, b = {B17, B16, B15, B14, B13, B12, B11, B10, B9, B8, B7, B6, B5, B4, B3, B2, B1, B0};
  reg [17:0] a_r = 18'd0, b_r = 18'd0;
  reg sa_r = 1'b0, sb_r = 1'b0;
  reg [35:0] p_r = 36'd0, o_r = 36'd0;

  wire [17:0] a_q = RA ? a_r : a, b_q = RB ? b_r : b;
  wire sa_q = RA ? sa_r : SIGNEDA, sb_q = RB ? sb_r : SIGNEDB;
  // 37-bit operands: an unsigned 18-bit value and a signed one both fit; the low 36 bits of the
  // product are P
  wire signed [36:0] a_x = {{19{sa_q & a_q[17]}}, a_q};
  wire signed [36:0] b_x = {{19{sb_q & b_q[17]}}, b_q};
  wire signed [73:0] full = a_x * b_x;
  wire [35:0] product = full[35:0];
  wire [35:0] p_q = RP ? p_r : product;
  wire [35:0] o_q = RO ? o_r : p_q;

  always @(posedge CLK0) begin
    if (SOURCEA || SOURCEB) $fatal(1, "MULT18X18D model: SOURCEA/SOURCEB high (shift inputs are not modelled)");
    if (RST0) begin
      a_r <= 18'd0; b_r <= 18'd0; sa_r <= 1'b0; sb_r <= 1'b0; p_r <= 36'd0; o_r <= 36'd0;
    end else if (CE0) begin
      a_r <= a; sa_r <= SIGNEDA;
      b_r <= b; sb_r <= SIGNEDB;
      p_r <= product;
      o_r <= p_q;
    end
  end

  assign {P35, P34, P33, P32, P31, P30, P29, P28, P27, P26, P25, P24, P23, P22, P21, P20, P19, P18, P17, P16, P15, P14, P13, P12, P11, P10, P9, P8, P7, P6, P5, P4, P3, P2, P1, P0} = o_q;
  assign {ROA17, ROA16, ROA15, ROA14, ROA13, ROA12, ROA11, ROA10, ROA9, ROA8, ROA7, ROA6, ROA5, ROA4, ROA3, ROA2, ROA1, ROA0} = a_q;
  assign {ROB17, ROB16, ROB15, ROB14, ROB13, ROB12, ROB11, ROB10, ROB9, ROB8, ROB7, ROB6, ROB5, ROB4, ROB3, ROB2, ROB1, ROB0} = b_q;
  assign {SROA17, SROA16, SROA15, SROA14, SROA13, SROA12, SROA11, SROA10, SROA9, SROA8, SROA7, SROA6, SROA5, SROA4, SROA3, SROA2, SROA1, SROA0} = 18'd0;
  assign {SROB17, SROB16, SROB15, SROB14, SROB13, SROB12, SROB11, SROB10, SROB9, SROB8, SROB7, SROB6, SROB5, SROB4, SROB3, SROB2, SROB1, SROB0} = 18'd0;
  assign {ROC17, ROC16, ROC15, ROC14, ROC13, ROC12, ROC11, ROC10, ROC9, ROC8, ROC7, ROC6, ROC5, ROC4, ROC3, ROC2, ROC1, ROC0} = 18'd0;
  assign SIGNEDP = 1'b0;
endmodule
