// ONNX export: the compile-time template (frontend/ExportTemplate.h) and the
// protobuf-free writer of the trainer (lwrt/export.h). An export must parse
// as the input model with exactly the trained initializers replaced, be one
// self-contained file, and read back through the importer; bad params and
// bad cut tables give messages.
#include "frontend/ExportTemplate.h"

#include "frontend/Frontend.h"
#include "lwrt/export.h"
#include "onnx/onnx_pb.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <iterator>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void writeFile(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

template <typename T> std::string rawBytes(const std::vector<T>& values) {
  std::string s(values.size() * sizeof(T), '\0');
  std::memcpy(s.data(), values.data(), s.size());
  return s;
}

onnx::TensorProto tensor(const std::string& name, int type, std::vector<int64_t> dims) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(type);
  for (int64_t d : dims)
    t.add_dims(d);
  return t;
}

void addExternal(onnx::TensorProto& t, const std::string& location, int64_t offset,
                 int64_t length) {
  t.set_data_location(onnx::TensorProto::EXTERNAL);
  auto* kv = t.add_external_data();
  kv->set_key("location");
  kv->set_value(location);
  kv = t.add_external_data();
  kv->set_key("offset");
  kv->set_value(std::to_string(offset));
  kv = t.add_external_data();
  kv->set_key("length");
  kv->set_value(std::to_string(length));
}

void addValueInfo(onnx::ValueInfoProto* vi, const std::string& name, std::vector<int64_t> dims) {
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims)
    tt->mutable_shape()->add_dim()->set_dim_value(d);
}

/// Y[4,2] = Reshape(Gemm(X[2,3], W[4,3]^T, B[4]), S) + C, where C is a
/// Constant whose value tensor is also named "W" (the walk must take graph
/// initializers only). W is stored as float_data, B as raw_data, S (int64,
/// not trained) as int64_data; the caller may move them to external files.
onnx::ModelProto gemmModel(const std::vector<float>& w, const std::vector<float>& b) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("export-test");
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(17);
  auto* kv = m.add_metadata_props();
  kv->set_key("author");
  kv->set_value("someone");
  onnx::GraphProto& g = *m.mutable_graph();
  g.set_name("g");
  addValueInfo(g.add_input(), "X", {2, 3});
  addValueInfo(g.add_output(), "Y", {4, 2});

  onnx::TensorProto wt = tensor("W", onnx::TensorProto::FLOAT, {4, 3});
  for (float v : w)
    wt.add_float_data(v);
  *g.add_initializer() = wt;
  onnx::TensorProto s = tensor("S", onnx::TensorProto::INT64, {2});
  s.add_int64_data(4);
  s.add_int64_data(2);
  *g.add_initializer() = s;
  onnx::TensorProto bt = tensor("B", onnx::TensorProto::FLOAT, {4});
  bt.set_raw_data(rawBytes(b));
  *g.add_initializer() = bt;

  auto* gemm = g.add_node();
  gemm->set_op_type("Gemm");
  gemm->set_name("gemm");
  gemm->add_input("X");
  gemm->add_input("W");
  gemm->add_input("B");
  gemm->add_output("H");
  auto* attr = gemm->add_attribute();
  attr->set_name("transB");
  attr->set_type(onnx::AttributeProto::INT);
  attr->set_i(1);
  auto* reshape = g.add_node();
  reshape->set_op_type("Reshape");
  reshape->add_input("H");
  reshape->add_input("S");
  reshape->add_output("R");
  auto* constant = g.add_node();
  constant->set_op_type("Constant");
  constant->add_output("C");
  attr = constant->add_attribute();
  attr->set_name("value");
  attr->set_type(onnx::AttributeProto::TENSOR);
  onnx::TensorProto ct = tensor("W", onnx::TensorProto::FLOAT, {4, 2});
  ct.set_raw_data(rawBytes(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  *attr->mutable_t() = ct;
  auto* add = g.add_node();
  add->set_op_type("Add");
  add->add_input("R");
  add->add_input("C");
  add->add_output("Y");
  return m;
}

std::vector<lwrt::ExportCut> runtimeCuts(const std::vector<lwcc::ExportCut>& cuts) {
  std::vector<lwrt::ExportCut> out;
  for (const lwcc::ExportCut& c : cuts)
    out.push_back({c.offset, c.param, c.bytes});
  return out;
}

std::string exportError(const std::string& modelPath,
                        const std::vector<lwcc::ExportParamSpec>& params) {
  auto t = lwcc::buildExportTemplate(modelPath, params);
  if (t)
    return "";
  return llvm::toString(t.takeError());
}

const onnx::TensorProto* findInit(const onnx::ModelProto& m, const std::string& name) {
  for (const auto& t : m.graph().initializer())
    if (t.name() == name)
      return &t;
  return nullptr;
}

class ExportTemplate : public ::testing::Test {
protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("lwcc-export-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (int k = 0; k < 12; ++k)
      w_.push_back(0.5f * static_cast<float>(k) - 1.0f);
    b_ = {0.25f, -0.5f, 1.0f, 2.0f};
    // Trained values whose bits must survive: -0, a NaN payload, a denormal.
    for (int k = 0; k < 12; ++k)
      newW_.push_back(100.0f + static_cast<float>(k));
    newW_[1] = -0.0f;
    newW_[2] = 3.25e-39f;
    uint32_t nanBits = 0x7fc12345u;
    std::memcpy(&newW_[3], &nanBits, 4);
    newB_ = {-7.5f, 8.25f, -9.0f, 10.125f};
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string save(const onnx::ModelProto& m, const std::string& name = "model.onnx") {
    std::string path = (dir_ / name).string();
    writeFile(path, m.SerializeAsString());
    return path;
  }

  /// Builds the template for B then W (the reverse of the graph's order),
  /// writes the export with the new values to `out` and parses it.
  onnx::ModelProto exportAndParse(const std::string& modelPath, const std::string& out) {
    std::vector<lwcc::ExportParamSpec> specs = {{"B", lwcc::DType::F32, 4},
                                                {"W", lwcc::DType::F32, 12}};
    auto templ = lwcc::buildExportTemplate(modelPath, specs);
    onnx::ModelProto parsed;
    if (!templ) {
      ADD_FAILURE() << llvm::toString(templ.takeError());
      return parsed;
    }
    // One cut per param, ascending, with W's payload (graph order) first.
    EXPECT_EQ(templ->cuts.size(), 2u);
    for (size_t k = 1; k < templ->cuts.size(); ++k)
      EXPECT_LT(templ->cuts[k - 1].offset, templ->cuts[k].offset);
    if (templ->cuts.size() == 2) {
      EXPECT_EQ(templ->cuts[0].param, 1u);
      EXPECT_EQ(templ->cuts[0].bytes, 48u);
      EXPECT_EQ(templ->cuts[1].param, 0u);
      EXPECT_EQ(templ->cuts[1].bytes, 16u);
    }
    std::vector<const void*> params = {newB_.data(), newW_.data()};
    const auto* bytes = reinterpret_cast<const unsigned char*>(templ->bytes.data());
    std::string err =
        lwrt::writeOnnxExport(out, bytes, templ->bytes.size(), runtimeCuts(templ->cuts), params);
    EXPECT_EQ(err, "");
    std::string file = readFile(out);
    EXPECT_EQ(file.size(), templ->bytes.size() + 48 + 16);
    EXPECT_FALSE(fs::exists(out + ".tmp"));
    EXPECT_TRUE(parsed.ParseFromString(file)) << "the export does not parse";
    return parsed;
  }

  void expectTrained(const onnx::ModelProto& m) {
    const onnx::TensorProto* w = findInit(m, "W");
    const onnx::TensorProto* b = findInit(m, "B");
    ASSERT_TRUE(w && b);
    for (const onnx::TensorProto* t : {w, b}) {
      EXPECT_EQ(t->data_type(), onnx::TensorProto::FLOAT);
      EXPECT_EQ(t->float_data_size(), 0);
      EXPECT_EQ(t->external_data_size(), 0);
      EXPECT_NE(t->data_location(), onnx::TensorProto::EXTERNAL);
    }
    EXPECT_EQ(w->raw_data(), rawBytes(newW_));
    EXPECT_EQ(b->raw_data(), rawBytes(newB_));
    ASSERT_EQ(w->dims_size(), 2);
    EXPECT_EQ(w->dims(0), 4);
    EXPECT_EQ(w->dims(1), 3);
    bool found = false;
    for (const auto& kv : m.metadata_props())
      if (kv.key() == lwcc::kExportedFromKey) {
        EXPECT_FALSE(found) << "the origin is recorded twice";
        found = true;
        EXPECT_EQ(kv.value(), "model.onnx");
      }
    EXPECT_TRUE(found);
  }

  fs::path dir_;
  std::vector<float> w_, b_, newW_, newB_;
};

TEST_F(ExportTemplate, ReplacesTrainedInitializersOnly) {
  onnx::ModelProto original = gemmModel(w_, b_);
  std::string out = (dir_ / "trained.onnx").string();
  onnx::ModelProto m = exportAndParse(save(original), out);
  expectTrained(m);

  // Everything else is as it was.
  const onnx::TensorProto* s = findInit(m, "S");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->SerializeAsString(), findInit(original, "S")->SerializeAsString());
  ASSERT_EQ(m.graph().node_size(), original.graph().node_size());
  for (int k = 0; k < m.graph().node_size(); ++k)
    EXPECT_EQ(m.graph().node(k).SerializeAsString(), original.graph().node(k).SerializeAsString());
  EXPECT_EQ(m.graph().input(0).SerializeAsString(), original.graph().input(0).SerializeAsString());
  EXPECT_EQ(m.graph().output(0).SerializeAsString(),
            original.graph().output(0).SerializeAsString());
  EXPECT_EQ(m.producer_name(), "export-test");
  EXPECT_EQ(m.opset_import_size(), 1);
  ASSERT_GE(m.metadata_props_size(), 1);
  EXPECT_EQ(m.metadata_props(0).key(), "author");

  // The importer reads the export back with the trained values.
  auto module = lwcc::importFile(out);
  ASSERT_TRUE(static_cast<bool>(module)) << llvm::toString(module.takeError());
  ASSERT_TRUE(module->weights.count("W") && module->weights.count("B"));
  const lwcc::Tensor& b = module->weights.at("B");
  ASSERT_EQ(b.f.size(), 4u);
  for (size_t k = 0; k < 4; ++k)
    EXPECT_EQ(b.f[k], newB_[k]);
  EXPECT_EQ(module->weights.at("W").f[0], newW_[0]);

  // Exporting an export records the origin once.
  std::string again = (dir_ / "again.onnx").string();
  fs::create_directories(dir_ / "sub");
  fs::copy_file(out, dir_ / "sub" / "model.onnx");
  expectTrained(exportAndParse((dir_ / "sub" / "model.onnx").string(), again));
}

TEST_F(ExportTemplate, ReadsOnnxText) {
  std::string text = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 3] X) => (float[2, 4] Y)
<float[4, 3] W = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, float[4] B = {1, 2, 3, 4}>
{
  Y = Gemm<transB = 1> (X, W, B)
}
)";
  std::string path = (dir_ / "model.onnxtext").string();
  writeFile(path, text);
  auto templ = lwcc::buildExportTemplate(path, {{"W", lwcc::DType::F32, 12}});
  ASSERT_TRUE(static_cast<bool>(templ)) << llvm::toString(templ.takeError());
  ASSERT_EQ(templ->cuts.size(), 1u);
  std::string out = (dir_ / "trained.onnx").string();
  std::vector<const void*> params = {newW_.data()};
  EXPECT_EQ(lwrt::writeOnnxExport(out, reinterpret_cast<const unsigned char*>(templ->bytes.data()),
                                  templ->bytes.size(), runtimeCuts(templ->cuts), params),
            "");
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(readFile(out)));
  EXPECT_EQ(findInit(m, "W")->raw_data(), rawBytes(newW_));
  const onnx::TensorProto* b = findInit(m, "B");
  ASSERT_NE(b, nullptr);
  EXPECT_FALSE(b->has_raw_data());
  ASSERT_EQ(b->float_data_size(), 4);
  EXPECT_EQ(b->float_data(3), 4.0f);
  EXPECT_EQ(m.graph().node(0).op_type(), "Gemm");
}

TEST_F(ExportTemplate, InlinesExternalData) {
  onnx::ModelProto original = gemmModel(w_, b_);
  onnx::GraphProto& g = *original.mutable_graph();
  // W: 16 bytes of junk then its data; B in a subfolder; S (not trained) alone.
  onnx::TensorProto& w = *g.mutable_initializer(0);
  w.clear_float_data();
  addExternal(w, "weights.bin", 16, 48);
  writeFile(dir_ / "weights.bin", std::string(16, 'x') + rawBytes(w_) + "tail");
  onnx::TensorProto& s = *g.mutable_initializer(1);
  s.clear_int64_data();
  std::vector<int64_t> sValues = {4, 2};
  addExternal(s, "s.bin", 0, 16);
  writeFile(dir_ / "s.bin", rawBytes(sValues));
  onnx::TensorProto& b = *g.mutable_initializer(2);
  b.clear_raw_data();
  addExternal(b, "data/b.bin", 0, 16);
  writeFile(dir_ / "data" / "b.bin", rawBytes(b_));
  std::string path = save(original);

  // Written elsewhere: nothing refers back to the model's folder.
  fs::create_directories(dir_ / "out");
  std::string out = (dir_ / "out" / "trained.onnx").string();
  onnx::ModelProto m = exportAndParse(path, out);
  expectTrained(m);
  for (const auto& t : m.graph().initializer()) {
    EXPECT_EQ(t.external_data_size(), 0) << t.name();
    EXPECT_NE(t.data_location(), onnx::TensorProto::EXTERNAL) << t.name();
  }
  EXPECT_EQ(findInit(m, "S")->raw_data(), rawBytes(sValues));
  EXPECT_EQ(fs::directory_iterator(dir_ / "out")->path().filename(), "trained.onnx");

  auto module = lwcc::importFile(out);
  ASSERT_TRUE(static_cast<bool>(module)) << llvm::toString(module.takeError());
  EXPECT_EQ(module->weights.at("W").f[11], newW_[11]);
}

TEST_F(ExportTemplate, ExternalDataMustStayInTheModelFolder) {
  onnx::ModelProto original = gemmModel(w_, b_);
  onnx::TensorProto& s = *original.mutable_graph()->mutable_initializer(1);
  s.clear_int64_data();
  addExternal(s, "../s.bin", 0, 16);
  writeFile(dir_ / "s.bin", std::string(16, '\0'));
  fs::create_directories(dir_ / "m");
  std::string err = exportError(save(original, "m/model.onnx"), {{"W", lwcc::DType::F32, 12}});
  EXPECT_TRUE(contains(err, "initializer 'S'")) << err;
  EXPECT_TRUE(contains(err, "..")) << err;

  // External data of the wrong size is an error too, not a short tensor.
  writeFile(dir_ / "m" / "s.bin", std::string(8, '\0'));
  s.clear_external_data();
  addExternal(s, "s.bin", 0, 8);
  err = exportError(save(original, "m/model.onnx"), {{"W", lwcc::DType::F32, 12}});
  EXPECT_TRUE(contains(err, "initializer 'S'")) << err;
}

TEST_F(ExportTemplate, BadParamsAreErrors) {
  std::string path = save(gemmModel(w_, b_));
  std::string err = exportError(path, {{"W", lwcc::DType::F32, 12}, {"nope", lwcc::DType::F32, 1}});
  EXPECT_TRUE(contains(err, "param 'nope'")) << err;
  EXPECT_TRUE(contains(err, "model.onnx")) << err;

  err = exportError(path, {{"W", lwcc::DType::F64, 12}});
  EXPECT_TRUE(contains(err, "param 'W'") && contains(err, "f64")) << err;

  err = exportError(path, {{"W", lwcc::DType::F32, 11}});
  EXPECT_TRUE(contains(err, "param 'W'") && contains(err, "12")) << err;

  err = exportError(path, {{"W", lwcc::DType::F32, 12}, {"W", lwcc::DType::F32, 12}});
  EXPECT_TRUE(contains(err, "param 'W'") && contains(err, "twice")) << err;

  err = exportError((dir_ / "missing.onnx").string(), {});
  EXPECT_TRUE(contains(err, "missing.onnx")) << err;

  writeFile(dir_ / "junk.onnx", "\xff\xff\xff");
  err = exportError((dir_ / "junk.onnx").string(), {});
  EXPECT_TRUE(contains(err, "junk.onnx")) << err;

  // No params: the template is the whole model, with no cuts.
  auto templ = lwcc::buildExportTemplate(path, {});
  ASSERT_TRUE(static_cast<bool>(templ)) << llvm::toString(templ.takeError());
  EXPECT_TRUE(templ->cuts.empty());
  onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(templ->bytes));
}

TEST(ExportWriter, BadCutTablesAreMessages) {
  fs::path dir = fs::temp_directory_path() / ("lwcc-export-writer-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string path = (dir / "out.onnx").string();
  const unsigned char templ[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  float a[2] = {1, 2}, b[1] = {3};
  std::vector<const void*> params = {a, b};

  auto write = [&](std::vector<lwrt::ExportCut> cuts, std::vector<const void*> ps) {
    return lwrt::writeOnnxExport(path, templ, sizeof templ, cuts, ps);
  };
  std::string err = write({{9, 0, 8}}, params);
  EXPECT_TRUE(contains(err, path) && contains(err, "past the end")) << err;
  err = write({{5, 0, 8}, {2, 1, 4}}, params);
  EXPECT_TRUE(contains(err, path) && contains(err, "ascend")) << err;
  err = write({{2, 2, 4}}, params);
  EXPECT_TRUE(contains(err, "out of range")) << err;
  err = write({{2, 0, 8}}, {nullptr, b});
  EXPECT_TRUE(contains(err, "null")) << err;
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  // A good table: pieces interleaved; cuts at the start and the end work.
  EXPECT_EQ(write({{0, 1, 4}, {3, 0, 8}, {8, 1, 4}}, params), "");
  std::string got = readFile(path);
  std::string want = rawBytes(std::vector<float>{3}) + "\x01\x02\x03" +
                     rawBytes(std::vector<float>{1, 2}) + "\x04\x05\x06\x07\x08" +
                     rawBytes(std::vector<float>{3});
  EXPECT_EQ(got, want);

  // A missing folder: the message names the path; nothing is created.
  std::string bad = (dir / "no-such-folder" / "out.onnx").string();
  err = lwrt::writeOnnxExport(bad, templ, sizeof templ, {}, {});
  EXPECT_TRUE(contains(err, bad)) << err;
  EXPECT_FALSE(fs::exists(dir / "no-such-folder"));
  // The earlier export is untouched by a failed one.
  EXPECT_NE(write({{1, 5, 4}}, params), "");
  EXPECT_EQ(readFile(path), want);
  fs::remove_all(dir);
}

} // namespace

namespace {

/// Z (zeros, the deduplicated initializer) read through Identity nodes as A
/// and B, each by a Relu: the form of PyTorch's deduplicated batch norm biases.
onnx::ModelProto dedupModel() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  onnx::GraphProto& g = *m.mutable_graph();
  onnx::TensorProto z = tensor("Z", onnx::TensorProto::FLOAT, {2});
  z.set_raw_data(rawBytes(std::vector<float>{0, 0}));
  *g.add_initializer() = z;
  for (const char* name : {"A", "B"}) {
    auto* id = g.add_node();
    id->set_op_type("Identity");
    id->add_input("Z");
    id->add_output(name);
    auto* relu = g.add_node();
    relu->set_op_type("Relu");
    relu->add_input(name);
    relu->add_output(std::string("r") + name);
    g.add_output()->set_name(std::string("r") + name);
  }
  return m;
}

} // namespace

TEST_F(ExportTemplate, SplitInitializersAreWrittenUnderTheNamesTheNodesRead) {
  std::string path = save(dedupModel());
  std::vector<lwcc::ExportParamSpec> specs = {{"A", lwcc::DType::F32, 2},
                                              {"B", lwcc::DType::F32, 2}};
  auto templ = lwcc::buildExportTemplate(path, specs);
  ASSERT_TRUE(static_cast<bool>(templ)) << llvm::toString(templ.takeError());
  std::vector<float> a = {1.5f, -2.0f}, b = {3.25f, 4.0f};
  std::vector<const void*> params = {a.data(), b.data()};
  std::string out = (dir_ / "trained.onnx").string();
  EXPECT_EQ(lwrt::writeOnnxExport(out, reinterpret_cast<const unsigned char*>(templ->bytes.data()),
                                  templ->bytes.size(), runtimeCuts(templ->cuts), params),
            "");
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(readFile(out)));
  ASSERT_EQ(m.graph().initializer_size(), 2) << "Z, which no node reads any more, stays";
  EXPECT_EQ(findInit(m, "A")->raw_data(), rawBytes(a));
  EXPECT_EQ(findInit(m, "B")->raw_data(), rawBytes(b));
  for (const auto& node : m.graph().node())
    EXPECT_EQ(node.op_type(), "Relu") << "an Identity node is left";

  // Tied (keep): the input's layout, Z read through the Identity nodes.
  auto tied =
      lwcc::buildExportTemplate(path, {{"Z", lwcc::DType::F32, 2}}, lwcc::TiedInitializers::Keep);
  ASSERT_TRUE(static_cast<bool>(tied)) << llvm::toString(tied.takeError());
  std::string keepOut = (dir_ / "tied.onnx").string();
  std::vector<const void*> one = {a.data()};
  EXPECT_EQ(lwrt::writeOnnxExport(keepOut,
                                  reinterpret_cast<const unsigned char*>(tied->bytes.data()),
                                  tied->bytes.size(), runtimeCuts(tied->cuts), one),
            "");
  ASSERT_TRUE(m.ParseFromString(readFile(keepOut)));
  ASSERT_EQ(m.graph().initializer_size(), 1);
  EXPECT_EQ(findInit(m, "Z")->raw_data(), rawBytes(a));
  EXPECT_EQ(m.graph().node_size(), 4);
  // Untied, the trainer has no param Z: asking for it is an error.
  EXPECT_NE(exportError(path, {{"Z", lwcc::DType::F32, 2}}).find("'Z' is not an initializer"),
            std::string::npos);
}
