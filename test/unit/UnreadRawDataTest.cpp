// A compile that needs no weights (--emit=plan, --emit=ir) leaves the
// initializers' large raw data in the model's file (loadModelProto with
// UnreadRawData): what it records, and what the import reads from the file
// where it needs values after all.
#include "frontend/Frontend.h"
#include "ir/IR.h"
#include "onnx/onnx_pb.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <limits>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;

template <class T> std::string bytesOf(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

onnx::TensorProto* addInit(onnx::GraphProto& g, const std::string& name, int type,
                           std::vector<int64_t> dims, const std::string& raw) {
  onnx::TensorProto* t = g.add_initializer();
  t->set_name(name);
  t->set_data_type(type);
  for (int64_t d : dims)
    t->add_dims(d);
  t->set_raw_data(raw);
  return t;
}

void addValue(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* to, const std::string& name,
              std::vector<int64_t> dims) {
  onnx::ValueInfoProto* v = to->Add();
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims)
    t->mutable_shape()->add_dim()->set_dim_value(d);
}

/// y = Gather(x, idx) (5000 int64 indices: 40000 bytes of raw data, which
/// the importer makes a constant), z = x2 + w (w: 32x48 floats, 6144
/// bytes), s = x3 + b (b: 3 floats, read as they are).
struct Model {
  std::vector<int64_t> idx;
  std::vector<float> w, b;
  onnx::ModelProto proto;

  Model() {
    for (int k = 0; k < 5000; ++k)
      idx.push_back(k % 4);
    for (int k = 0; k < 32 * 48; ++k)
      w.push_back(0.25f * static_cast<float>(k));
    b = {1.0f, 2.0f, 3.0f};
    proto.set_ir_version(8);
    onnx::OperatorSetIdProto* op = proto.add_opset_import();
    op->set_domain("");
    op->set_version(13);
    onnx::GraphProto& g = *proto.mutable_graph();
    g.set_name("g");
    addInit(g, "idx", onnx::TensorProto::INT64, {5000}, bytesOf(idx));
    addInit(g, "w", onnx::TensorProto::FLOAT, {32, 48}, bytesOf(w));
    addInit(g, "b", onnx::TensorProto::FLOAT, {3}, bytesOf(b));
    auto node = [&](const std::string& type, std::vector<std::string> in, const std::string& out) {
      onnx::NodeProto* n = g.add_node();
      n->set_op_type(type);
      n->set_name(out + "_node");
      for (const std::string& i : in)
        n->add_input(i);
      n->add_output(out);
    };
    node("Gather", {"x", "idx"}, "y");
    node("Add", {"x2", "w"}, "z");
    node("Add", {"x3", "b"}, "s");
    addValue(g.mutable_input(), "x", {4, 3});
    addValue(g.mutable_input(), "x2", {32, 48});
    addValue(g.mutable_input(), "x3", {3});
    addValue(g.mutable_output(), "y", {5000, 3});
    addValue(g.mutable_output(), "z", {32, 48});
    addValue(g.mutable_output(), "s", {3});
  }
};

class UnreadRawData : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lwcc-unread-raw-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const onnx::ModelProto& m, const std::string& name,
                    const std::string& tail = "") {
    std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    out << m.SerializeAsString() << tail;
    return path;
  }
  fs::path dir_;
};

TEST_F(UnreadRawData, LargeRawDataStaysInTheFileWhereItLies) {
  Model m;
  const std::string path = write(m.proto, "m.onnx");
  onnx::ModelProto read;
  lwcc::UnreadRawData unread;
  ASSERT_FALSE(static_cast<bool>(lwcc::loadModelProto(path, read, &unread)));
  EXPECT_EQ(unread.file, path);
  ASSERT_EQ(read.graph().initializer_size(), 3);
  const onnx::TensorProto &idx = read.graph().initializer(0), &w = read.graph().initializer(1),
                          &b = read.graph().initializer(2);
  // The large ones' raw data is not read, and lies where recorded.
  EXPECT_FALSE(idx.has_raw_data());
  EXPECT_FALSE(w.has_raw_data());
  EXPECT_EQ(b.raw_data(), bytesOf(m.b));
  EXPECT_EQ(unread.at.size(), 2u);
  ASSERT_TRUE(unread.at.count(&idx));
  ASSERT_TRUE(unread.at.count(&w));
  EXPECT_FALSE(unread.at.count(&b));
  std::ifstream in(path, std::ios::binary);
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto [wAt, wBytes] = unread.at.at(&w);
  EXPECT_EQ(file.substr(static_cast<size_t>(wAt), static_cast<size_t>(wBytes)), bytesOf(m.w));
  auto [iAt, iBytes] = unread.at.at(&idx);
  EXPECT_EQ(file.substr(static_cast<size_t>(iAt), static_cast<size_t>(iBytes)), bytesOf(m.idx));
  // The rest is the model as protobuf parses it.
  EXPECT_EQ(read.graph().node_size(), 3);
  EXPECT_EQ(read.graph().node(0).op_type(), "Gather");
  EXPECT_EQ(read.opset_import(0).version(), 13);
}

TEST_F(UnreadRawData, ImportReadsTheValuesItNeedsFromTheFile) {
  Model m;
  const std::string path = write(m.proto, "m.onnx");
  lwcc::ImportOptions opts;
  opts.weights = false;
  auto noWeights = lwcc::importFile(path, opts);
  ASSERT_TRUE(static_cast<bool>(noWeights)) << llvm::toString(noWeights.takeError());
  // Integer values are read (from the file): idx is a constant of them;
  // float ones are not.
  const lwcc::Op* idx = nullptr;
  for (const auto& op : noWeights->graph->ops())
    if (op->kind() == lwcc::OpKind::Constant && op->result()->name() == "idx")
      idx = op.get();
  ASSERT_NE(idx, nullptr);
  EXPECT_EQ(idx->getInts("ivalue"), m.idx);
  EXPECT_TRUE(noWeights->weights.empty());
  EXPECT_FALSE(noWeights->weights.count("b"));
  // With the weights, every value as written.
  auto all = lwcc::importFile(path);
  ASSERT_TRUE(static_cast<bool>(all)) << llvm::toString(all.takeError());
  const lwcc::Tensor& w = all->weights.at("w");
  for (int k = 0; k < 32 * 48; ++k)
    ASSERT_EQ(w.get(k), m.w[static_cast<size_t>(k)]) << k;
  EXPECT_EQ(all->weights.at("b").get(2), 3.0);
}

TEST_F(UnreadRawData, NonFiniteInitializersAreFrozenWithOrWithoutTheWeights) {
  // w holds a -inf (a mask's), b is finite: w is a constant of the model, a
  // frozen param (no gradient, no update); b is trained. Without the weights
  // a small initializer is read all the same to tell.
  Model m;
  m.w[7] = -std::numeric_limits<float>::infinity();
  m.proto.mutable_graph()->mutable_initializer(1)->set_raw_data(bytesOf(m.w));
  const std::string path = write(m.proto, "m.onnx");
  auto frozen = [](const lwcc::Module& mod, const std::string& name) {
    for (const auto& p : mod.graph->params())
      if (p->paramName() == name)
        return p->frozen();
    ADD_FAILURE() << "no param " << name;
    return false;
  };
  for (bool weights : {false, true}) {
    lwcc::ImportOptions opts;
    opts.weights = weights;
    auto mod = lwcc::importFile(path, opts);
    ASSERT_TRUE(static_cast<bool>(mod)) << llvm::toString(mod.takeError());
    EXPECT_TRUE(frozen(*mod, "w")) << "weights " << weights;
    EXPECT_FALSE(frozen(*mod, "b")) << "weights " << weights;
    if (weights)
      EXPECT_EQ(mod->weights.at("w").get(7), -std::numeric_limits<double>::infinity());
    else
      EXPECT_TRUE(mod->weights.empty());
  }
}

void putVarint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7)
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
  out.push_back(static_cast<char>(v));
}

/// A length-delimited field: its tag, length and bytes.
std::string field(uint64_t number, const std::string& bytes) {
  std::string out;
  putVarint(out, number << 3 | 2);
  putVarint(out, bytes.size());
  return out + bytes;
}

TEST_F(UnreadRawData, SeveralRawDataFieldsAreReadAsProtobufReadsThem) {
  // w's raw_data (TensorProto field 9) twice in the file, the first a float
  // short: protobuf keeps the last. Such a tensor is parsed whole. The
  // bytes written by hand (serializing keeps one): the model without its
  // graph, then the graph (field 7) without w, then w (field 5).
  Model m;
  onnx::ModelProto rest = m.proto;
  onnx::GraphProto graph = rest.graph();
  rest.clear_graph();
  onnx::TensorProto w = graph.initializer(1);
  graph.mutable_initializer()->DeleteSubrange(1, 1);
  const std::string last = bytesOf(m.w);
  w.clear_raw_data();
  const std::string tensor =
      w.SerializeAsString() + field(9, last.substr(0, last.size() - 4)) + field(9, last);
  const std::string bytes =
      rest.SerializeAsString() + field(7, graph.SerializeAsString() + field(5, tensor));
  const std::string path = (dir_ / "twice.onnx").string();
  std::ofstream(path, std::ios::binary) << bytes;
  onnx::ModelProto whole;
  ASSERT_TRUE(whole.ParseFromString(bytes));
  ASSERT_EQ(whole.graph().initializer(2).raw_data(), last);
  onnx::ModelProto read;
  lwcc::UnreadRawData unread;
  ASSERT_FALSE(static_cast<bool>(lwcc::loadModelProto(path, read, &unread)));
  ASSERT_EQ(read.graph().initializer_size(), 3);
  EXPECT_EQ(read.graph().initializer(2).raw_data(), last);
  EXPECT_FALSE(unread.at.count(&read.graph().initializer(2)));
  EXPECT_TRUE(unread.at.count(&read.graph().initializer(0))); // idx, once
  lwcc::ImportOptions opts;
  opts.weights = false;
  auto imported = lwcc::importFile(path, opts);
  EXPECT_TRUE(static_cast<bool>(imported)) << llvm::toString(imported.takeError());
}

TEST_F(UnreadRawData, AFileThatDoesNotParseIsReportedAsBefore) {
  Model m;
  std::string bytes = m.proto.SerializeAsString();
  const std::string path = (dir_ / "cut.onnx").string();
  std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  onnx::ModelProto read;
  lwcc::UnreadRawData unread;
  llvm::Error e = lwcc::loadModelProto(path, read, &unread);
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_NE(llvm::toString(std::move(e)).find("not a valid ONNX model"), std::string::npos);
}

} // namespace
